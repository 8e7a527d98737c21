// The torch binding: the only translation unit that includes torch. It validates the call, finds
// the variant the call needs, checks that this build holds it (the compiled-in table), and launches
// it through the narrowed dispatch switches.
//
// Its compile is on the critical path of every build (issue 17), so it includes only what it uses:
// the Tensor class and one header per ATen function it calls (ATen/ops/*.h; a new at:: call needs
// its header added below), c10's CUDA stream and device guard, and torch's pybind11 casters. Not
// ATen/ATen.h (every operator), torch/python.h (with it the C++ frontend: torch/nn), nor
// ATen/cuda/CUDAContext.h (cuBLAS, cuSPARSE and cuSOLVER headers, for the device's properties).
// With both defines below, a header that pulls in every operator (ATen/Functions.h) is an error.
#define AT_PER_OPERATOR_HEADERS
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/any.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/env_value.h"
#include "common/index_errors.h"
#include "common/params.h"
#include "common/splitkv_heuristic.h"
#include "common/splitkv_path.h"  // FLASHBUILD_SPLITKV_PATH: the path a decoding call takes, read at every call
#include "flashbuild_dispatch.h"
#include "common/splitkv_descriptor_switch.h"  // the TMA descriptors kept from call to call: on, or off for an A/B
#include "flashbuild_table.h"

namespace flashbuild {

namespace table = build_table;

// Names, head dims and feature bits come from the generated tables: variant_name, kKernelHeadDims and
// Feature (common/variant_space.h, from flashbuild/selection/space.py) and what this build holds
// (flashbuild_table.h). The binding spells none of them itself.

inline std::string to_text(int v) { return std::to_string(v); }
inline std::string to_text(const char* v) { return v; }

// Raised as flashbuild.errors.VariantNotBuiltError (a RuntimeError) in Python.
class VariantNotBuilt : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raised as flashbuild.errors.InvalidIndexError (a ValueError) in Python: an index value a kernel found
// outside its range (common/index_errors.h).
class InvalidIndex : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Messages are built with std::string alone: iostreams inside an extension .so can meet a second
// libstdc++ (seen on the GPU host's toolchain, where ostringstream crashed in locale code).
[[noreturn]] void switch_miss(const char* axis, long value) {
  throw VariantNotBuilt(std::string("flashbuild: this build has no kernel for ") + axis + " " + std::to_string(value) +
                        " (its compiled-in table and its dispatch switches disagree: remove build " +
                        build_table::kBuildKey + " with `flashbuild clean` and build again)");
}

namespace {

bool holds(const std::string& name) {
  for (const char* v : table::kVariants) {
    if (name == v) return true;
  }
  return false;
}

// "a,b,c" of a table axis plus the asked value when the build lacks it.
template <class T, size_t N>
std::string axis_with(const T (&values)[N], const T& asked, const char* prefix = "") {
  std::vector<std::string> all;
  for (const T& v : values) all.push_back(prefix + std::string(to_text(v)));
  const std::string extra = prefix + std::string(to_text(asked));
  if (std::find(all.begin(), all.end(), extra) == all.end()) all.push_back(extra);
  std::string s;
  for (size_t i = 0; i < all.size(); ++i) s += (i ? "," : "") + all[i];
  return s;
}

// " --no-local --no-softcap" for the features neither the build nor the call has.
std::string feature_flags(int needed_mask) {
  std::string flags;
  for (int i = 0; i < kNumFeatureNames; ++i) {
    if (!((table::kFeaturesMask | needed_mask) & (1 << i))) flags += std::string(" --no-") + kFeatureNames[i];
  }
  return flags;
}

// The flashbuild command that builds what this build holds plus what a call asked for.
std::string rebuild_command(const char* direction, int hdim, const char* dtype, bool causal, int arch,
                            int needed_features) {
  bool any_causal = causal, any_noncausal = !causal;
  for (bool c : table::kCausal) {
    any_causal = any_causal || c;
    any_noncausal = any_noncausal || !c;
  }
  const char* causal_flag = any_causal && any_noncausal ? "both" : (any_causal ? "on" : "off");
  return "flashbuild --hdim " + axis_with(table::kHeadDims, hdim) + " --dtype " + axis_with(table::kDTypes, dtype) +
         " --arch " + axis_with(table::kArchs, arch, kArchPrefix) + " --direction " + axis_with(table::kDirections, direction) +
         " --causal " + causal_flag + feature_flags(needed_features);
}

// The message for a call this build cannot serve: what was asked, what the build holds, and the
// command that builds both.
[[noreturn]] void variant_not_built(const std::string& asked, const char* direction, int hdim, int user_hdim,
                                    const char* dtype, bool causal, int arch, int needed_features,
                                    const std::string& features_asked) {
  std::string msg = "flashbuild: this build has no kernel " + asked + " (asked: " + direction + ", head dim " +
                    std::to_string(user_hdim);
  if (user_hdim != hdim) msg += " -> runs on the hdim-" + std::to_string(hdim) + " kernel, padded";
  msg += std::string(", ") + dtype + ", " + (causal ? "causal" : "non-causal") + ", sm" + std::to_string(arch);
  if (!features_asked.empty()) msg += ", " + features_asked;
  msg += "). It holds: ";
  for (int i = 0; i < table::kNumVariants; ++i) msg += std::string(i ? ", " : "") + table::kVariants[i];
  msg += ". Build one that holds it with: " + rebuild_command(direction, hdim, dtype, causal, arch, needed_features);
  throw VariantNotBuilt(msg);
}

int kernel_head_dim(int hdim) {
  for (int k : kKernelHeadDims) {
    if (hdim <= k) return k;
  }
  TORCH_CHECK(false, "flashbuild: head dim ", hdim, " is larger than the largest kernel head dim, ", kMaxKernelHeadDim);
}

// An attribute of the tensor's device: a cheap query, unlike cudaGetDeviceProperties (which
// at::cuda::getDeviceProperties runs once per device and caches), so it is not cached here.
int device_attribute(const at::Tensor& t, cudaDeviceAttr attribute) {
  int value = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, t.get_device()));
  return value;
}

// The built arch that runs on this device: the exact one, else an older one of the same major
// (sm80 machine code runs on sm86 and sm89).
int device_arch(const at::Tensor& t) {
  const int cc = device_attribute(t, cudaDevAttrComputeCapabilityMajor) * 10 +
                 device_attribute(t, cudaDevAttrComputeCapabilityMinor);
  int best = -1;
  for (int a : table::kArchs) {
    if (a == cc) return a;
    if (a / 10 == cc / 10 && a < cc && a > best) best = a;
  }
  return best >= 0 ? best : cc;
}

// ---------------------------------------------------------------- bad index values, reported by the device
// One record per device (common/index_errors.h) in mapped pinned memory: the kernels write it, the host
// reads it with no synchronisation. Allocated on a device's first call that passes index tensors; with
// the capture mode relaxed for the allocation, so that a first call inside a CUDA graph capture works.
struct IndexRecord {
  int* host = nullptr;
  int* device = nullptr;
};

std::mutex index_records_mutex;
std::vector<IndexRecord> index_records;

IndexRecord index_record(int device, bool allocate) {
  std::lock_guard<std::mutex> lock(index_records_mutex);
  if (int(index_records.size()) <= device) index_records.resize(device + 1);
  IndexRecord& r = index_records[device];
  if (r.host == nullptr && allocate) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    void* host = nullptr;
    const cudaError_t err = cudaHostAlloc(&host, kIndexRecordWords * sizeof(int),
                                          cudaHostAllocMapped | cudaHostAllocPortable);
    C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    C10_CUDA_CHECK(err);
    std::memset(host, 0, kIndexRecordWords * sizeof(int));
    void* mapped = nullptr;
    C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, host, 0));
    r = {static_cast<int*>(host), static_cast<int*>(mapped)};
  }
  return r;
}

// The Hopper split-KV's fused combine counts the splits that have finished each query block in a buffer that
// must be zero when a launch starts; the kernel leaves it zero when it ends (FwdEpilogue::combine_if_last), so
// each buffer is cleared once, when made, and serves every later launch that runs after the previous one:
// one per (device, stream) for eager calls, which a stream runs in order, and one per (capture, stream) in a
// graph capture: a captured stream's launches run in order in every replay, and the replays of one graph run
// one after the other, while a buffer is no other graph's, stream's or forked branch's.
// Made eagerly: cleared by a memset ordered on the call's stream. Made inside a capture: a memset there would
// be captured, not run, so it runs on a stream of our own, whose end the host waits for once (the capture's
// stream is not synchronised). A capture's buffer (16 KB) lives as long as the process.
constexpr int kSplitCounterSlots = 4096;

struct SplitCounterKey {
  int device;
  cudaStream_t stream;
  unsigned long long capture;  // the capture's id; 0 for eager calls
  bool operator<(const SplitCounterKey& o) const {
    return std::tie(device, stream, capture) < std::tie(o.device, o.stream, o.capture);
  }
};

std::mutex split_counters_mutex;
std::map<SplitCounterKey, unsigned*> split_counter_buffers;

unsigned* split_counters(int device, cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture = 0;
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &capture));
  const bool capturing = status == cudaStreamCaptureStatusActive;
  const SplitCounterKey key{device, stream, capturing ? capture : 0};
  std::lock_guard<std::mutex> lock(split_counters_mutex);
  unsigned*& buffer = split_counter_buffers[key];
  if (buffer != nullptr) return buffer;
  constexpr size_t bytes = kSplitCounterSlots * sizeof(unsigned);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // cudaMalloc is not allowed in a global capture
  C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  void* memory = nullptr;
  cudaError_t err = cudaMalloc(&memory, bytes);
  if (err == cudaSuccess && !capturing) {
    err = cudaMemsetAsync(memory, 0, bytes, stream);
  } else if (err == cudaSuccess) {
    cudaStream_t own = nullptr;
    err = cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
    if (err == cudaSuccess) err = cudaMemsetAsync(memory, 0, bytes, own);
    if (err == cudaSuccess) err = cudaStreamSynchronize(own);
    if (own != nullptr) cudaStreamDestroy(own);
  }
  C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  C10_CUDA_CHECK(err);
  buffer = static_cast<unsigned*>(memory);
  return buffer;
}

// The record as a 4-int CUDA tensor (mapped host memory), for reports made with torch ops.
at::Tensor index_record_tensor(const at::Tensor& like) {
  const IndexRecord r = index_record(like.get_device(), true);
  return at::from_blob(r.device, {kIndexRecordWords}, [](void*) {}, like.options().dtype(at::kInt), like.device());
}

std::string index_error_message(const int (&w)[kIndexRecordWords], int device) {
  const auto arg = IndexArg(w[0] & ((1 << kIndexArgBits) - 1));
  const int column = int(unsigned(w[0]) >> kIndexArgBits);
  const std::string row = std::to_string(w[1]), value = std::to_string(w[2]), bound = std::to_string(w[3]);
  std::string what;
  switch (arg) {
    case IndexArg::kCacheSeqlens:
      what = "cache_seqlens[" + row + "] = " + value + ", outside 0.." + bound + " (the keys already in a cache row, "
             "leaving room for the appended k, if any)";
      break;
    case IndexArg::kCacheBatchIdx:
      what = "cache_batch_idx[" + row + "] = " + value + ", outside 0.." + bound + " (the rows of k_cache)";
      break;
    case IndexArg::kCacheLeftpad:
      what = "cache_leftpad[" + row + "] = " + value + ", outside 0.." + bound + " (the positions of a cache row)";
      break;
    case IndexArg::kBlockTable:
      what = "block_table[" + row + ", " + std::to_string(column) + "] = " + value + ", outside 0.." + bound +
             " (the pages of k_cache), for a page that row's keys fill";
      break;
    case IndexArg::kCuSeqlensQ:
    case IndexArg::kCuSeqlensK: {
      const char* name = arg == IndexArg::kCuSeqlensQ ? "cu_seqlens_q" : "cu_seqlens_k";
      what = std::string(name) + "[" + std::to_string(column) + "] = " + value + ": the offsets must start at 0, never "
             "decrease, end at most at the packed tensor's " + bound + " rows, and hold no sequence longer than " +
             (arg == IndexArg::kCuSeqlensQ ? "max_seqlen_q" : "max_seqlen_k") + " (" + row + ")";
      break;
    }
    default:
      what = "an index value outside its range (record " + std::to_string(w[0]) + ")";
  }
  return "flashbuild: an earlier attention call on cuda:" + std::to_string(device) + " passed " + what +
         ". Its kernels used the value clamped into range (that call's outputs are meaningless) and touched no "
         "memory outside the tensors. This call did not run; fix the index tensor and call again. (Bad index "
         "values are found on the device and raised by the next call on it, or by check_errors(), which "
         "synchronizes first.)";
}

// Raises the device's recorded bad index value, if any, and clears the record. Reads host memory only.
void raise_index_error(int device) {
  const IndexRecord r = index_record(device, false);
  if (r.host == nullptr) return;
  volatile int* rec = r.host;
  if ((rec[0] & ((1 << kIndexArgBits) - 1)) == 0) return;
  int w[kIndexRecordWords];
  for (int i = 0; i < kIndexRecordWords; ++i) w[i] = rec[i];
  for (int i = 0; i < kIndexRecordWords; ++i) rec[i] = 0;
  throw InvalidIndex(index_error_message(w, device));
}

// The kernels take sequence lengths as int: a larger max_seqlen would wrap and size the grid too small.
void check_max_seqlen(int64_t max_seqlen, const char* max_name) {
  TORCH_CHECK(max_seqlen >= 0 && max_seqlen <= std::numeric_limits<int>::max(), "flashbuild: ", max_name,
              " must be 0 to ", std::numeric_limits<int>::max(), " (the longest sequence); got ", max_seqlen);
}

// A varlen call's offsets, checked on the device: the copy the kernels read starts at 0, never
// decreases, ends inside the packed tensor's `total` rows and holds no sequence longer than max_seqlen
// (the grid is sized by it: longer rows would go unwritten). An entry that differs from the caller's is
// reported to the device's record (the first such entry, its value, total and max_seqlen). Torch ops on
// the device, no copy to the host: a call inside a CUDA graph capture records them too.
at::Tensor checked_offsets(const at::Tensor& cu, IndexArg arg, int64_t total, int64_t max_seqlen) {
  const int64_t n = cu.size(0);
  const at::Tensor cu64 = cu.to(at::kLong);
  const at::Tensor lengths = at::clamp(cu64.narrow(0, 1, n - 1) - cu64.narrow(0, 0, n - 1), 0, max_seqlen);
  const at::Tensor checked = at::constant_pad_nd(at::clamp_max(at::cumsum(lengths, 0), total), {1, 0}, 0).to(at::kInt);
  const at::Tensor bad = checked != cu;
  const at::Tensor first = at::argmax(bad.to(at::kInt));  // the first differing entry
  const auto longs = cu64.options();
  const at::Tensor report = at::stack({first * (1 << kIndexArgBits) + int64_t(arg), at::full({}, max_seqlen, longs),
                                       cu64.gather(0, first.view({1})).squeeze(0), at::full({}, total, longs)});
  at::Tensor record = index_record_tensor(cu);
  record.copy_(at::where(at::any(bad), report.to(at::kInt), record));
  return checked;
}

// q, k, v of one call; `k_name`/`v_name` name k and v in the messages (k_cache, v_cache for a KV
// cache, whose batch may differ from q's: same_batch = false).
void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::string& k_name = "k",
               const std::string& v_name = "v", bool same_batch = true) {
  const std::string qkv = "q, " + k_name + " and " + v_name, kv = k_name + " and " + v_name;
  TORCH_CHECK(q.is_cuda() && k.is_cuda() && v.is_cuda(), "flashbuild: ", qkv, " must be CUDA tensors (got ",
              q.device(), ", ", k.device(), ", ", v.device(), "); move them with .cuda()");
  TORCH_CHECK(q.device() == k.device() && q.device() == v.device(), "flashbuild: ", qkv,
              " must be on the same device (got ", q.device(), ", ", k.device(), ", ", v.device(), "); move ", kv,
              " with .to(q.device)");
  const auto dt = q.scalar_type();
  TORCH_CHECK(dt == at::kHalf || dt == at::kBFloat16, "flashbuild: q must be float16 or bfloat16, got ", dt,
              "; convert with q.half() or q.bfloat16()");
  TORCH_CHECK(k.scalar_type() == dt && v.scalar_type() == dt, "flashbuild: ", qkv, " must share one dtype (got ",
              dt, ", ", k.scalar_type(), ", ", v.scalar_type(), "); convert ", kv, " with .to(q.dtype)");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "flashbuild: ", qkv,
              " must be 4-D (batch, seqlen, nheads, head_dim); got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK((!same_batch || q.size(0) == k.size(0)) && k.sizes() == v.sizes(), "flashbuild: ", kv,
              " must have the same shape", (same_batch ? " and the batch of q" : ""), "; got q ", q.sizes(), ", ",
              k_name, " ", k.sizes(), ", ", v_name, " ", v.sizes());
  TORCH_CHECK(q.size(3) == k.size(3), "flashbuild: q and ", k_name, " must have the same head dim; got ", q.size(3),
              " and ", k.size(3));
  TORCH_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0, "flashbuild: the number of query heads (", q.size(2),
              ") must be a multiple of the number of key/value heads (", k.size(2), ")");
  TORCH_CHECK(q.size(3) > 0 && q.size(3) <= kMaxKernelHeadDim, "flashbuild: head dim must be in 1..", kMaxKernelHeadDim,
              " (kernel sizes ", kKernelHeadDimsText, "; smaller ones run padded), got ", q.size(3));
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->stride(-1) == 1, "flashbuild: the last dimension of ", qkv, " must be contiguous; call "
                ".contiguous() first (got strides ", t->strides(), ")");
  }
}

// t itself when the kernels can read its rows as 16-byte vectors (common/params.h), else a contiguous
// copy: a view at an odd element offset (x[..., 1:65]) or with a stride that is not a multiple of 16
// bytes would make them fault on a misaligned address, which poisons the process.
bool vector_ready(const at::Tensor& t) {
  if (t.stride(-1) != 1 || !vector_addressable(t.data_ptr(), t.element_size(), {})) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    if (!vector_addressable(t.data_ptr(), t.element_size(), {{t.stride(d), t.size(d)}})) return false;
  }
  return true;
}
at::Tensor vector_aligned(const at::Tensor& t) {
  if (t.numel() == 0 || vector_ready(t)) return t;
  return at::empty(t.sizes(), t.options()).copy_(t);
}

// Pads the head dim with zeros up to the kernel size: Q·K^T and the first columns of P·V do not change.
// The copy (a new allocation) is aligned; an unpadded tensor is made so (vector_aligned).
at::Tensor pad_head_dim(const at::Tensor& t, int kernel_hdim) {
  if (t.size(-1) == kernel_hdim) return vector_aligned(t);
  return at::constant_pad_nd(t, {0, kernel_hdim - t.size(-1)}, 0);
}

// What a call asks for, checked against the build: a missing variant is an error that names it.
struct Call {
  const char* direction;
  int user_hdim;
  int hdim;  // the kernel size the head dim runs on (padded)
  bool is_fp16;
  bool causal;
  int arch;
  float softmax_scale;
  int features;      // the features the call needs (bits of flashbuild::Feature)
  bool deterministic_on_features;  // a deterministic backward the feature kernel serves (use_deterministic_kernel)
  int window_left;   // as the kernels take them (common/params.h): unbounded sides are
  int window_right;  // seqlen_q + seqlen_k, never -1
  float softcap;
};

// flash-attn's window_size and softcap arguments.
struct FeatureArgs {
  int64_t window_left = -1;
  int64_t window_right = -1;
  double softcap = 0.0;
};

// Resolves the call's window and softcap into what its kernels take, and which features it needs.
// A window side that cuts no key of any row is unbounded (left >= seqlen_k - 1, right >= seqlen_q
// - 1; with varlen the maxima); a non-causal window (-1, 0) is the causal mask, as in flash-attn;
// a causal call's right side is 0.
void resolve_features(Call& c, const FeatureArgs& f, int seqlen_q, int seqlen_k) {
  TORCH_CHECK(f.softcap >= 0.0, "flashbuild: softcap must be >= 0 (0 = off), got ", f.softcap);
  TORCH_CHECK(f.window_left >= -1 && f.window_right >= -1,
              "flashbuild: window_size must be (left, right) with each -1 (unbounded) or >= 0; got (", f.window_left,
              ", ", f.window_right, ")");
  const int64_t unbounded = int64_t(seqlen_q) + seqlen_k;
  const int left = f.window_left >= seqlen_k - 1 ? -1 : int(f.window_left);
  int right = f.window_right >= seqlen_q - 1 ? -1 : int(f.window_right);
  if (c.causal) right = 0;
  if (!c.causal && left < 0 && right == 0) c.causal = true;
  const bool local = left >= 0 || (right >= 0 && !c.causal);
  c.features = (local ? kLocal : 0) | (f.softcap > 0.0 ? kSoftcap : 0);
  c.window_left = left < 0 ? int(unbounded) : left;
  c.window_right = c.causal ? 0 : (right < 0 ? int(unbounded) : right);
  c.softcap = float(f.softcap);
}

std::string describe_features(const Call& c, const FeatureArgs& f) {
  std::string s;
  if (c.features & kLocal) {
    s += "window_size=(" + std::to_string(f.window_left) + ", " + std::to_string(f.window_right) + ")";
  }
  if (c.features & kSoftcap) s += std::string(s.empty() ? "" : ", ") + "softcap=" + std::to_string(f.softcap);
  return s;
}

Call resolve(const char* direction, const at::Tensor& q, bool causal, std::optional<double> softmax_scale,
             const FeatureArgs& f, int seqlen_q, int seqlen_k) {
  Call c{};
  c.direction = direction;
  c.user_hdim = q.size(-1);
  c.hdim = kernel_head_dim(c.user_hdim);
  c.is_fp16 = q.scalar_type() == at::kHalf;
  c.causal = causal;
  c.arch = device_arch(q);
  c.softmax_scale = softmax_scale ? float(*softmax_scale) : 1.0f / std::sqrt(float(c.user_hdim));
  resolve_features(c, f, seqlen_q, seqlen_k);
  const char* dtype = dtype_name(c.is_fp16 ? DType::kFp16 : DType::kBf16);
  const std::string features = describe_features(c, f);
  const int missing = c.features & ~table::kFeaturesMask;
  if (missing) {
    const char* what = (missing & kLocal) ? "local (sliding-window) attention" : "softcap";
    int first_missing = 0;
    while (!(missing & (1 << first_missing))) ++first_missing;
    const std::string flag = std::string("--no-") + kFeatureNames[first_missing];
    std::string built = table::kNumFeatures ? "" : "none";
    for (int i = 0; i < table::kNumFeatures; ++i) built += std::string(i ? ", " : "") + table::kFeatures[i];
    throw VariantNotBuilt(std::string("flashbuild: this build has no ") + what + " (asked: " + features +
                          "): it was built with " + flag + " (its features: " + built + "). Build it with: " +
                          rebuild_command(direction, c.hdim, dtype, c.causal, c.arch, c.features) +
                          ", or call without " +
                          ((missing & kLocal) ? "window_size" : "softcap"));
  }
  const std::string asked = variant_name(direction, c.hdim, dtype, c.causal, c.arch, c.features ? table::kFeaturesMask : 0);
  if (!holds(asked)) {
    variant_not_built(asked, direction, c.hdim, c.user_hdim, dtype, c.causal, c.arch, c.features, features);
  }
  return c;
}

// A deterministic backward runs where the mode is compiled: the variant's own kernel when that is the
// Hopper backward (it orders its dQ adds itself; the build table lists such variants) and the call
// needs no feature; otherwise the feature kernel (the Ampere path compiles the mode there alone, so its
// plain kernel keeps its speed). A build without features then has no such kernel, and a build whose
// feature TU for this variant is missing says which build holds it.
bool deterministic_plain(const std::string& name) {
  for (int i = 0; i < table::kNumDeterministicPlain; ++i) {
    if (name == table::kDeterministicPlain[i]) return true;
  }
  return false;
}

void use_deterministic_kernel(Call& c) {
  const char* dtype = dtype_name(c.is_fp16 ? DType::kFp16 : DType::kBf16);
  if (c.features == 0 && deterministic_plain(variant_name(c.direction, c.hdim, dtype, c.causal, c.arch))) return;
  const int all_features = kAllFeatures;
  if (table::kFeaturesMask == 0) {
    throw VariantNotBuilt(std::string("flashbuild: this build has no deterministic backward (asked: deterministic=True): "
                                      "the mode is compiled into the kernel that holds the build's features (local, "
                                      "softcap; on sm90 head dims 64-256 hold it in the plain Hopper kernel too), and "
                                      "this build has none for this call. Build it with: ") +
                          rebuild_command(c.direction, c.hdim, dtype, c.causal, c.arch, all_features) +
                          ", or call with deterministic=False");
  }
  const std::string asked = variant_name(c.direction, c.hdim, dtype, c.causal, c.arch, table::kFeaturesMask);
  if (!holds(asked)) {
    variant_not_built(asked, c.direction, c.hdim, c.user_hdim, dtype, c.causal, c.arch, c.features | table::kFeaturesMask,
                      "deterministic=True");
  }
  c.deterministic_on_features = true;
}

#define FLASHBUILD_DISPATCH(call, ...)                                                                        \
  ARCH_SWITCH((call).arch, [&] {                                                                              \
    HEADDIM_SWITCH((call).hdim, [&] {                                                                         \
      FP16_SWITCH((call).is_fp16, [&] {                                                                       \
        CAUSAL_SWITCH((call).causal, [&] {                                                                    \
          FEATURES_SWITCH((call).features != 0 || (call).deterministic_on_features, [&] { __VA_ARGS__; });    \
        });                                                                                                   \
      });                                                                                                     \
    });                                                                                                       \
  })

template <class Params>
void set_features(Params& p, const Call& c) {
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
}

// (batch, row, head) strides of a (batch, seqlen, heads, dim) tensor or a packed (tokens, heads, dim) one.
struct Strides {
  int64_t batch, row, head;
};
Strides strides_of(const at::Tensor& t) {
  if (t.dim() == 4) return {t.stride(0), t.stride(1), t.stride(2)};
  return {0, t.stride(0), t.stride(1)};
}

FwdParams fwd_params(const Call& c, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& out,
                     at::Tensor& lse, int batch, int seqlen_q, int seqlen_k) {
  FwdParams p{};
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.o = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  const Strides sq = strides_of(q), sk = strides_of(k), sv = strides_of(v), so = strides_of(out);
  p.q_batch_stride = sq.batch, p.q_row_stride = sq.row, p.q_head_stride = sq.head;
  p.k_batch_stride = sk.batch, p.k_row_stride = sk.row, p.k_head_stride = sk.head;
  p.v_batch_stride = sv.batch, p.v_row_stride = sv.row, p.v_head_stride = sv.head;
  p.o_batch_stride = so.batch, p.o_row_stride = so.row, p.o_head_stride = so.head;
  // lse is (batch, nheads, seqlen_q), or (nheads, total_q) for packed sequences.
  p.lse_batch_stride = lse.dim() == 3 ? lse.stride(0) : 0;
  p.lse_head_stride = lse.dim() == 3 ? lse.stride(1) : lse.stride(0);
  p.batch = batch, p.seqlen_q = seqlen_q, p.seqlen_k = seqlen_k;
  p.nheads = q.size(-2), p.nheads_k = k.size(-2), p.head_dim = c.hdim;
  p.softmax_scale = c.softmax_scale;
  p.softmax_scale_log2 = c.softmax_scale * kLog2e;
  p.num_splits = 1;
  set_features(p, c);
  return p;
}

// A one-query GQA call packed for the split-KV kernels: query head kh * group + j becomes row j of K/V head kh, so a
// CTA reads a K/V head once for its whole group. Strides only, no views: q and out (b, 1, h, d) are seen as
// (b, group, h_k, d), the LSE (b, h, 1) as (b, h_k, group).
void pack_query_heads(FwdParams& p, int group) {
  p.seqlen_q = group, p.nheads = p.nheads_k;
  p.q_row_stride = p.q_head_stride, p.q_head_stride *= group;
  p.o_row_stride = p.o_head_stride, p.o_head_stride *= group;
  p.lse_head_stride *= group;
}

void check_cu_seqlens(const at::Tensor& cu, const char* name, const at::Tensor& q) {
  TORCH_CHECK(cu.is_cuda() && cu.device() == q.device() && cu.scalar_type() == at::kInt && cu.dim() == 1 &&
                  cu.size(0) >= 2 && cu.is_contiguous(),
              "flashbuild: ", name, " must be a contiguous int32 CUDA tensor (batch + 1,) on q's device (got ",
              cu.scalar_type(), " ", cu.sizes(), " on ", cu.device(), "); convert with .to(torch.int32).to(q.device)");
}

void check_varlen_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
              "flashbuild: varlen q, k, v must be 3-D (total_tokens, nheads, head_dim); got ", q.sizes(), ", ",
              k.sizes(), ", ", v.sizes());
  // The 4-D checks with a batch of one cover dtype, device, heads, head dim and contiguity.
  check_qkv(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0));
}

at::Tensor gqa_sum(const at::Tensor& dkv_expanded, int nheads_k) {
  // dK and dV of a K/V head are the sums over the query heads that share it (in fp32). A torch
  // reduction over one dim, which adds in a fixed order (no atomics; torch lists no sum among its
  // nondeterministic ops), so deterministic mode needs nothing more here.
  const int nheads = dkv_expanded.size(-2);
  if (nheads == nheads_k) return dkv_expanded;
  auto sizes = dkv_expanded.sizes().vec();
  sizes.back() = dkv_expanded.size(-1);
  sizes[sizes.size() - 2] = nheads / nheads_k;
  sizes.insert(sizes.end() - 2, nheads_k);
  return dkv_expanded.view(sizes).to(at::kFloat).sum(-2).to(dkv_expanded.scalar_type());
}

at::Tensor unpad(const at::Tensor& t, const Call& c) { return c.hdim == c.user_hdim ? t : t.narrow(-1, 0, c.user_hdim); }

// A forward call with no keys: every query row sees none, so its output is 0 and its LSE +inf (what the
// kernels write for such a row), with no kernel launched. The Hopper forward takes no such call
// (hopper/fwd_launch.h), so that no sm90 build compiles an Ampere-path kernel for it.
std::vector<at::Tensor> no_keys_answer(at::Tensor out, at::Tensor lse, const Call& c) {
  out.zero_();
  lse.fill_(std::numeric_limits<float>::infinity());
  return {unpad(out, c), lse};
}

// A backward call with no queries or no keys: nothing flows between them, so every gradient is 0, with no
// kernel launched. The Hopper backward takes no such call (hopper/bwd_launch.h), for the same reason.
std::vector<at::Tensor> empty_call_grads(at::Tensor dq, at::Tensor dk, at::Tensor dv, int nheads_k, const Call& c) {
  dq.zero_(), dk.zero_(), dv.zero_();
  return {unpad(dq, c), unpad(gqa_sum(dk, nheads_k), c), unpad(gqa_sum(dv, nheads_k), c)};
}

// One query row per head (decoding through flash_attn_func) with GQA or MQA on sm90, when the call's
// (batch, head) blocks outnumber the SMs: the query heads that share a K/V head become the rows of one
// block. q (batch, 1, nheads, d) is viewed as (batch, group, nheads_k, d), out and lse likewise (no
// copy), so one CTA streams each K/V head once for its whole group instead of once per query head.
// One row sees every key, causal or not, so the call takes the non-causal kernel (none built: not
// packed); a window is position-dependent: not packed. Within one wave packing only idles SMs (1.6-13 %
// slower at batch 4 x 32 heads); from many waves it cuts them (benchmarks/fwd_pack_gqa/).
std::optional<std::vector<at::Tensor>> mha_fwd_packed_rows(const at::Tensor& q_in, const at::Tensor& k_in,
                                                           const at::Tensor& v_in, std::optional<double> softmax_scale,
                                                           const FeatureArgs& f) {
  const int64_t batch = q_in.size(0), nheads = q_in.size(2), nheads_k = k_in.size(2), group = nheads / nheads_k;
  if (q_in.size(1) != 1 || group == 1 || k_in.size(1) == 0 || device_arch(q_in) < 90 ||
      batch * nheads <= device_attribute(q_in, cudaDevAttrMultiProcessorCount)) {
    return std::nullopt;
  }
  std::optional<Call> found;
  try {
    // The window resolved for the call's one row: (-1, 0) then cuts nothing, as for the unpacked call.
    found = resolve("fwd", q_in, false, softmax_scale, f, 1, k_in.size(1));
  } catch (const VariantNotBuilt&) {
    return std::nullopt;  // the causal variant alone serves it, unpacked
  }
  const Call& c = *found;
  if (c.causal || (c.features & kLocal)) return std::nullopt;
  c10::cuda::CUDAGuard device_guard(q_in.device());
  const at::Tensor q = pad_head_dim(q_in, c.hdim), k = pad_head_dim(k_in, c.hdim), v = pad_head_dim(v_in, c.hdim);
  const at::Tensor q_rows = q.reshape({batch, nheads_k, group, c.hdim}).transpose(1, 2);
  at::Tensor out = at::empty({batch, 1, nheads, c.hdim}, q.options());
  at::Tensor out_rows = out.view({batch, nheads_k, group, c.hdim}).transpose(1, 2);
  at::Tensor lse = at::empty({batch, nheads_k, group}, q.options().dtype(at::kFloat));
  const FwdParams p = fwd_params(c, q_rows, k, v, out_rows, lse, int(batch), int(group), k.size(1));
#if FLASHBUILD_HAS_FWD
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  FLASHBUILD_DISPATCH(c, run_fwd<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(p, stream));
#endif
  return std::vector<at::Tensor>{unpad(out, c), lse.view({batch, nheads, 1})};
}

}  // namespace

std::vector<at::Tensor> mha_fwd(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, bool causal,
                                std::optional<double> softmax_scale, const FeatureArgs& f) {
  check_qkv(q_in, k_in, v_in);
  raise_index_error(q_in.get_device());
  if (auto packed = mha_fwd_packed_rows(q_in, k_in, v_in, softmax_scale, f)) return *packed;
  const Call c = resolve("fwd", q_in, causal, softmax_scale, f, q_in.size(1), k_in.size(1));
  c10::cuda::CUDAGuard device_guard(q_in.device());
  const at::Tensor q = pad_head_dim(q_in, c.hdim), k = pad_head_dim(k_in, c.hdim), v = pad_head_dim(v_in, c.hdim);
  const int batch = q.size(0), seqlen_q = q.size(1), nheads = q.size(2);
  at::Tensor out = at::empty({batch, seqlen_q, nheads, c.hdim}, q.options());
  at::Tensor lse = at::empty({batch, nheads, seqlen_q}, q.options().dtype(at::kFloat));
  if (k.size(1) == 0) return no_keys_answer(out, lse, c);
  const FwdParams p = fwd_params(c, q, k, v, out, lse, batch, seqlen_q, k.size(1));
#if FLASHBUILD_HAS_FWD
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  FLASHBUILD_DISPATCH(c, run_fwd<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(p, stream));
#endif
  return {unpad(out, c), lse};
}

std::vector<at::Tensor> mha_varlen_fwd(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                       const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                       int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal,
                                       std::optional<double> softmax_scale, const FeatureArgs& f) {
  check_varlen_qkv(q_in, k_in, v_in);
  check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q_in);
  check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", q_in);
  TORCH_CHECK(cu_seqlens_q.size(0) == cu_seqlens_k.size(0), "flashbuild: cu_seqlens_q and cu_seqlens_k must have "
              "the same length (batch + 1); got ", cu_seqlens_q.size(0), " and ", cu_seqlens_k.size(0));
  check_max_seqlen(max_seqlen_q, "max_seqlen_q");
  check_max_seqlen(max_seqlen_k, "max_seqlen_k");
  raise_index_error(q_in.get_device());
  const Call c = resolve("fwd", q_in, causal, softmax_scale, f, max_seqlen_q, max_seqlen_k);
  c10::cuda::CUDAGuard device_guard(q_in.device());
  const at::Tensor cu_q = checked_offsets(cu_seqlens_q, IndexArg::kCuSeqlensQ, q_in.size(0), max_seqlen_q);
  const at::Tensor cu_k = checked_offsets(cu_seqlens_k, IndexArg::kCuSeqlensK, k_in.size(0), max_seqlen_k);
  const at::Tensor q = pad_head_dim(q_in, c.hdim), k = pad_head_dim(k_in, c.hdim), v = pad_head_dim(v_in, c.hdim);
  at::Tensor out = at::empty({q.size(0), q.size(1), c.hdim}, q.options());
  at::Tensor lse = at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat));
  // No queries (out is empty) or no keys in any sequence (checked_offsets: max_seqlen_k bounds them all).
  if (q.size(0) == 0 || k.size(0) == 0 || max_seqlen_k == 0) return no_keys_answer(out, lse, c);
  FwdParams p = fwd_params(c, q, k, v, out, lse, cu_seqlens_q.size(0) - 1, max_seqlen_q, max_seqlen_k);
  p.cu_seqlens_q = cu_q.data_ptr<int>();
  p.cu_seqlens_k = cu_k.data_ptr<int>();
  p.total_q = q.size(0), p.total_k = k.size(0);
#if FLASHBUILD_HAS_FWD
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  FLASHBUILD_DISPATCH(c, run_fwd<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(p, stream));
#endif
  return {unpad(out, c), lse};
}

// flash-attn's optional arguments of flash_attn_with_kvcache, as the binding takes them.
struct KVCacheArgs {
  std::optional<at::Tensor> k, v;  // new keys and values, appended to the cache in place
  std::optional<at::Tensor> cache_seqlens;
  std::optional<at::Tensor> rotary_cos, rotary_sin;
  std::optional<at::Tensor> cache_batch_idx, cache_leftpad, block_table;
  bool rotary_interleaved = true;
};

// An int32 tensor of a KV-cache call with one entry (or row) per batch row of q.
void check_index(const at::Tensor& t, const char* name, const at::Tensor& q, int dims, const char* shape) {
  TORCH_CHECK(t.scalar_type() == at::kInt, "flashbuild: ", name, " must be int32, got ", t.scalar_type(),
              "; convert it with .to(torch.int32)");
  TORCH_CHECK(t.device() == q.device(), "flashbuild: ", name, " must be on q's device ", q.device(), " (got ",
              t.device(), "); move it with .to(q.device)");
  TORCH_CHECK(t.dim() == dims && t.size(0) == q.size(0), "flashbuild: ", name, " must have shape ", shape,
              " with batch = ", q.size(0), " (q's); got ", t.sizes());
  TORCH_CHECK(t.stride(-1) == 1, "flashbuild: ", name, " must be contiguous; call .contiguous() first (got strides ",
              t.strides(), ")");
}

// What the checks of a KV-cache call found out about its cache.
struct CacheShape {
  bool paged;
  int page_size;   // paged only
  int capacity;    // the positions one batch row's cache holds
  int seqlen_new;  // appended keys per row (0: none)
  int rotary_dim;  // 0: no rotary
};

// The KV-cache arguments beyond q, k_cache and v_cache (check_qkv's), each error naming the argument,
// what was given and the fix. kernel_hdim: the kernel size the head dim runs on.
CacheShape check_kvcache_args(const at::Tensor& q, const at::Tensor& k_cache, const KVCacheArgs& a, int kernel_hdim) {
  CacheShape g{};
  const int64_t batch = q.size(0), nheads_k = k_cache.size(2), head_dim = q.size(3);
  g.paged = a.block_table.has_value();
  if (g.paged) {
    check_index(*a.block_table, "block_table", q, 2, "(batch, max_pages_per_sequence)");
    TORCH_CHECK(!a.cache_batch_idx && !a.cache_leftpad, "flashbuild: a paged KV cache (block_table) does not take ",
                (a.cache_batch_idx ? "cache_batch_idx" : "cache_leftpad"), " (flash-attn does not either): its "
                "block table already says where each row's keys are; pass ",
                (a.cache_batch_idx ? "cache_batch_idx" : "cache_leftpad"), "=None");
    g.page_size = int(k_cache.size(1));
    const int block_n = splitkv_block_n(kernel_hdim);
    TORCH_CHECK(g.page_size > 0 && g.page_size % block_n == 0, "flashbuild: a paged KV cache needs a page size "
                "(k_cache.size(1)) that is a multiple of ", block_n, ", the split-KV kernel's key block at head dim ",
                kernel_hdim, " (so that no key tile straddles two pages); got k_cache ", k_cache.sizes(),
                ", page size ", g.page_size, ". Use a page size of ", block_n, ", ", 2 * block_n, ", ", 3 * block_n,
                ", ... (256, flash-attn's rule, works at every head dim)");
    g.capacity = int(a.block_table->size(1) * g.page_size);
  } else {
    if (a.cache_batch_idx) {
      check_index(*a.cache_batch_idx, "cache_batch_idx", q, 1, "(batch,)");
    } else {
      TORCH_CHECK(k_cache.size(0) == batch, "flashbuild: k_cache and v_cache must have q's batch (", batch,
                  ") rows; got k_cache ", k_cache.sizes(), ". Pass cache_batch_idx (int32, (batch,)) to pick rows "
                  "of a larger cache");
    }
    g.capacity = int(k_cache.size(1));
  }
  if (a.cache_seqlens) check_index(*a.cache_seqlens, "cache_seqlens", q, 1, "(batch,)");
  if (a.cache_leftpad) check_index(*a.cache_leftpad, "cache_leftpad", q, 1, "(batch,)");

  TORCH_CHECK(a.k.has_value() == a.v.has_value(), "flashbuild: new keys and values are appended together: got ",
              (a.k ? "k" : "v"), " without ", (a.k ? "v" : "k"), "; pass both k= and v= (batch, seqlen_new, nheads_k, "
              "head_dim), or neither");
  if (a.k) {
    const at::Tensor &k = *a.k, &v = *a.v;
    for (const at::Tensor* t : {&k, &v}) {
      const char* name = t == &k ? "k" : "v";
      TORCH_CHECK(t->device() == q.device() && t->scalar_type() == q.scalar_type(), "flashbuild: ", name,
                  " (the new ", (t == &k ? "keys" : "values"), ") must have q's dtype and device (", q.scalar_type(),
                  ", ", q.device(), "); got ", t->scalar_type(), " on ", t->device(), "; convert with .to(q)");
      TORCH_CHECK(t->dim() == 4 && t->size(0) == batch && t->size(2) == nheads_k && t->size(3) == head_dim,
                  "flashbuild: ", name, " must have shape (batch, seqlen_new, nheads_k, head_dim) = (", batch,
                  ", seqlen_new, ", nheads_k, ", ", head_dim, "); got ", t->sizes());
      TORCH_CHECK(t->stride(-1) == 1, "flashbuild: the last dimension of ", name, " must be contiguous; call "
                  ".contiguous() first (got strides ", t->strides(), ")");
    }
    TORCH_CHECK(k.sizes() == v.sizes(), "flashbuild: k and v must have the same shape; got ", k.sizes(), " and ",
                v.sizes());
    TORCH_CHECK(a.cache_seqlens.has_value(), "flashbuild: appending k and v needs cache_seqlens (where each row's "
                "new keys go); pass cache_seqlens= (an int, or int32 (batch,))");
    TORCH_CHECK(k.size(1) <= g.capacity, "flashbuild: k and v append ", k.size(1), " keys per row, more than the "
                "cache holds (", g.capacity, " positions); make the cache larger");
    g.seqlen_new = int(k.size(1));
  }

  // Their values (rows, lengths, pages) are checked on the device: common/cache_index_check.h.

  TORCH_CHECK(a.rotary_cos.has_value() == a.rotary_sin.has_value(), "flashbuild: rotary embedding needs both "
              "rotary_cos and rotary_sin; got only ", (a.rotary_cos ? "rotary_cos" : "rotary_sin"));
  if (a.rotary_cos) {
    TORCH_CHECK(a.k.has_value(), "flashbuild: rotary_cos/rotary_sin rotate the appended keys and q, so they need k= "
                "and v= (flash-attn's rule); without new keys, rotate q yourself and pass rotary_cos=None, "
                "rotary_sin=None");
    const at::Tensor &cos = *a.rotary_cos, &sin = *a.rotary_sin;
    for (const at::Tensor* t : {&cos, &sin}) {
      const char* name = t == &cos ? "rotary_cos" : "rotary_sin";
      TORCH_CHECK(t->device() == q.device() && t->scalar_type() == q.scalar_type(), "flashbuild: ", name,
                  " must have q's dtype and device (", q.scalar_type(), ", ", q.device(), "); got ", t->scalar_type(),
                  " on ", t->device(), "; convert with .to(q)");
      TORCH_CHECK(t->dim() == 2 && t->sizes() == cos.sizes(), "flashbuild: rotary_cos and rotary_sin must both be "
                  "(seqlen_ro, rotary_dim / 2); got ", cos.sizes(), " and ", sin.sizes());
      TORCH_CHECK(t->is_contiguous(), "flashbuild: ", name, " must be contiguous; call .contiguous() first (got "
                  "strides ", t->strides(), ")");
    }
    g.rotary_dim = int(2 * cos.size(1));
    TORCH_CHECK(g.rotary_dim > 0 && g.rotary_dim <= head_dim, "flashbuild: rotary_cos is (seqlen_ro, rotary_dim / 2) "
                "with 0 < rotary_dim <= head_dim (", head_dim, "); got ", cos.sizes(), ", rotary_dim ", g.rotary_dim);
    TORCH_CHECK(cos.size(0) >= g.capacity, "flashbuild: rotary_cos/rotary_sin have ", cos.size(0), " positions, "
                "fewer than the cache's ", g.capacity, "; give one row of angles per cache position");
  }
  return g;
}

// A KV-cache call's index tensors as its kernels read them: views of the check kernel's output
// (common/cache_index_check.h), each value clamped into its range; undefined when not given.
struct CheckedIndices {
  at::Tensor all;  // [cache_seqlens | cache_batch_idx | cache_leftpad | block_table (batch, max_pages)]
  at::Tensor seqlens, batch_idx, leftpad, block_table;
};

// Room for the checked copies of the call's index tensors, and the params pointing the kernels at them
// (and the check kernel at the caller's); nothing when the call has none.
CheckedIndices checked_indices(FwdParams& p, const KVCacheArgs& a, const CacheShape& g, int64_t batch,
                               int64_t cache_rows, const at::Tensor& q) {
  CheckedIndices ci;
  if (!a.cache_seqlens && !a.cache_batch_idx && !a.cache_leftpad && !a.block_table) return ci;
  const int64_t max_pages = g.paged ? a.block_table->size(1) : 0;
  ci.all = at::empty({3 * batch + batch * max_pages}, q.options().dtype(at::kInt));
  CacheIndexCheck& c = p.index_check;
  c.max_pages = int(max_pages), c.num_cache_rows = int(cache_rows), c.capacity = g.capacity;
  c.checked = ci.all.data_ptr<int>();
  c.error = index_record(q.get_device(), true).device;
  if (a.cache_seqlens) {
    c.seqlens = a.cache_seqlens->data_ptr<int>();
    ci.seqlens = ci.all.narrow(0, 0, batch);
    p.seqused_k = ci.seqlens.data_ptr<int>();
  }
  if (a.cache_batch_idx) {
    c.batch_idx = a.cache_batch_idx->data_ptr<int>();
    ci.batch_idx = ci.all.narrow(0, batch, batch);
    p.cache_batch_idx = ci.batch_idx.data_ptr<int>();
  }
  if (a.cache_leftpad) {
    c.leftpad = a.cache_leftpad->data_ptr<int>();
    ci.leftpad = ci.all.narrow(0, 2 * batch, batch);
    p.cache_leftpad = ci.leftpad.data_ptr<int>();
  }
  if (a.block_table) {
    c.block_table = a.block_table->data_ptr<int>();
    c.block_table_batch_stride = a.block_table->stride(0);
    ci.block_table = ci.all.narrow(0, 3 * batch, batch * max_pages).view({batch, max_pages});
    p.block_table = ci.block_table.data_ptr<int>();
    p.block_table_batch_stride = max_pages;
  }
  return ci;
}

// A plain decoding call on the Hopper split-KV is one launch: no check kernel; the attention kernel reads the
// caller's index tensors and clamps and records each value where it reads it (CacheIndexCheck::at_read).
void read_indices_at_use(FwdParams& p, const KVCacheArgs& a, const CacheShape& g, int64_t cache_rows,
                         const at::Tensor& q) {
  CacheIndexCheck& c = p.index_check;
  c.at_read = true;
  c.checked = nullptr;  // run_cache_index_check launches nothing
  c.capacity = g.capacity, c.num_cache_rows = int(cache_rows);
  const bool any = a.cache_seqlens || a.cache_batch_idx || a.cache_leftpad || a.block_table;
  c.error = any ? index_record(q.get_device(), true).device : nullptr;
  p.seqused_k = a.cache_seqlens ? a.cache_seqlens->data_ptr<int>() : nullptr;
  p.cache_batch_idx = a.cache_batch_idx ? a.cache_batch_idx->data_ptr<int>() : nullptr;
  p.cache_leftpad = a.cache_leftpad ? a.cache_leftpad->data_ptr<int>() : nullptr;
  if (a.block_table) {
    p.block_table = a.block_table->data_ptr<int>();
    p.block_table_batch_stride = a.block_table->stride(0);
  }
}

// A padded head dim runs on a zero-padded copy of the cache, so the appended rows land in the copy;
// this writes them back to the caller's cache (torch indexing: the kernels only know the copy), at the
// checked indices the kernels wrote at (in range, so torch's own index checks never fire).
void write_back_appended(const at::Tensor& cache, const at::Tensor& padded, const CheckedIndices& ci,
                         const CacheShape& g, int batch) {
  const auto longs = ci.seqlens.options().dtype(at::kLong);
  const at::Tensor pos = ci.seqlens.to(at::kLong).unsqueeze(1) + at::arange(g.seqlen_new, longs).unsqueeze(0);
  at::Tensor block, row;
  if (g.paged) {
    block = ci.block_table.to(at::kLong).gather(1, at::div(pos, g.page_size, "floor"));
    row = at::remainder(pos, g.page_size);
  } else {
    const at::Tensor rows = ci.batch_idx.defined() ? ci.batch_idx.to(at::kLong) : at::arange(batch, longs);
    block = rows.unsqueeze(1).expand_as(pos);
    row = pos;
  }
  // The index ops as t.index({block, row}) calls them, without ATen/TensorIndexing.h (that form
  // would first move an index held on another device to t's: here every one is on q's, checked).
  const c10::List<std::optional<at::Tensor>> at_rows{block, row};
  cache.index_put_(at_rows, padded.index(at_rows).narrow(-1, 0, cache.size(-1)));
}

// A KV-cache call with at least this many queries (a prefill chunk) runs on the forward kernel when
// the build has it (mha_fwd_kvcache).
constexpr int kPrefillRowsOnFwdKernel = 128;

// A paged cache goes to the Hopper forward at the head dims whose key block (128: hopper/fwd_traits.h,
// fwd_tile) is the split-KV kernel's (splitkv_block_n), so every page size check_kvcache_args
// accepts holds whole key boxes. hdim 192/256 (96- and 80-key boxes) stay on the split-KV kernel;
// hopper/fwd_launch.h refuses a page size that does not fit rather than read past a page.
constexpr bool fwd_kernel_pages(int kernel_hdim) { return kernel_hdim <= 128; }

// Decoding over a KV cache: few queries (seqlen_q 1-16) against cache_seqlens[b] keys of each
// batch row, the keys split across CTAs when the batch alone does not fill the GPU. With k and v,
// first appends them to the cache in place (rotated with rotary_cos/sin, which rotate q too).
std::vector<at::Tensor> mha_fwd_kvcache(const at::Tensor& q_in, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                        const KVCacheArgs& a, bool causal, std::optional<double> softmax_scale,
                                        int64_t num_splits, const FeatureArgs& f) {
  check_qkv(q_in, k_cache, v_cache, "k_cache", "v_cache", /*same_batch=*/false);
  raise_index_error(q_in.get_device());
  TORCH_CHECK(num_splits >= 0 && num_splits <= kMaxSplits, "flashbuild: num_splits must be 0 (auto) to ",
              kMaxSplits, ", got ", num_splits);
  const int batch = q_in.size(0), seqlen_q = q_in.size(1), nheads = q_in.size(2), nheads_k = k_cache.size(2);
  const CacheShape g = check_kvcache_args(q_in, k_cache, a, kernel_head_dim(q_in.size(3)));
  // One query row sees the whole cache either way (the causal mask is bottom-right aligned), so
  // causal only matters for seqlen_q > 1: such a call takes the non-causal kernel, where the query
  // heads sharing a K/V head become rows of one block and each CTA reads K/V once for all of them.
  // A build holding only the causal kernel serves it too, unpacked.
  const bool single_row = seqlen_q == 1;
  const Call c = [&] {
    if (!(single_row && causal)) { return resolve("splitkv", q_in, causal, softmax_scale, f, seqlen_q, g.capacity); }
    try {
      return resolve("splitkv", q_in, false, softmax_scale, f, seqlen_q, g.capacity);
    } catch (const VariantNotBuilt&) {
      return resolve("splitkv", q_in, true, softmax_scale, f, seqlen_q, g.capacity);
    }
  }();
  c10::cuda::CUDAGuard device_guard(q_in.device());
  // Packed rows would be taken for query positions by a causal or local window's mask.
  const bool pack = single_row && nheads > nheads_k && !c.causal && !(c.features & kLocal);
  const int group = nheads / nheads_k;
  // The kernels read (and append to) the cache itself, or a zero-padded copy for a padded head dim
  // (whose appended rows write_back_appended copies back). A cache the kernels cannot read in 16-byte
  // vectors is read through an aligned copy too, but appended to in place it cannot be.
  for (const at::Tensor* cache : {&k_cache, &v_cache}) {
    TORCH_CHECK(g.seqlen_new == 0 || c.hdim != c.user_hdim || vector_ready(*cache), "flashbuild: ",
                (cache == &k_cache ? "k_cache" : "v_cache"), " is appended to in place, so its rows must start at "
                "multiples of 16 bytes (its pointer and strides); got strides ", cache->strides(), " at storage "
                "offset ", cache->storage_offset(), ". Allocate the cache on its own (torch.empty), not as a view at "
                "an odd offset");
  }
  const at::Tensor k = pad_head_dim(k_cache, c.hdim), v = pad_head_dim(v_cache, c.hdim);
  at::Tensor q = pad_head_dim(q_in, c.hdim), q_unrotated;
  if (g.rotary_dim) {  // the append kernel writes q rotated into a scratch copy, which the attention reads
    q_unrotated = q.contiguous();
    q = at::empty_like(q_unrotated);
  }
  at::Tensor out = at::empty({batch, seqlen_q, nheads, c.hdim}, q.options());
  // A cache of no positions holds no keys (nor room to append any): every row's output is 0, its LSE
  // +inf, with no kernel launched (the Hopper split-KV takes no such call: hopper/splitkv_launch.h).
  if (g.capacity == 0) {
    return no_keys_answer(out, at::empty({batch, nheads, seqlen_q}, q.options().dtype(at::kFloat)), c);
  }
  at::Tensor lse = at::empty({batch, nheads, seqlen_q}, q.options().dtype(at::kFloat));
  FwdParams p = fwd_params(c, q, k, v, out, lse, batch, seqlen_q, g.capacity);
  if (pack) pack_query_heads(p, group);
  p.num_pages = int(k.size(0));  // the Hopper kernels' views of the cache: its pages or batch rows
  if (g.paged) p.page_size = g.page_size;
  // The kernels read the index tensors through checked copies, which the launch's first kernel writes (or, on the
  // Hopper split-KV's one-launch path, clamp each value where they read it: read_indices_at_use). No value is read on
  // the host: the call stays free of synchronisation, and capturable.
  CheckedIndices ci;
  at::Tensor knew, vnew;
  if (a.k) {  // even with no new rows: the append kernel is what rotates q
    knew = pad_head_dim(*a.k, c.hdim), vnew = pad_head_dim(*a.v, c.hdim);
    const Strides sk = strides_of(knew), sv = strides_of(vnew);
    p.knew = knew.data_ptr(), p.vnew = vnew.data_ptr(), p.seqlen_knew = g.seqlen_new;
    p.knew_batch_stride = sk.batch, p.knew_row_stride = sk.row, p.knew_head_stride = sk.head;
    p.vnew_batch_stride = sv.batch, p.vnew_row_stride = sv.row, p.vnew_head_stride = sv.head;
  }
  if (g.rotary_dim) {
    p.rotary_cos = a.rotary_cos->data_ptr(), p.rotary_sin = a.rotary_sin->data_ptr();
    p.rotary_dim = g.rotary_dim, p.rotary_interleaved = a.rotary_interleaved;
    // flash-attn's rule: causal or local calls rotate query i at cache_seqlens + i, others all at
    // cache_seqlens (a window side as long as the cache bounds nothing).
    const auto bounds = [&](int64_t side) { return side >= 0 && side < g.capacity; };
    p.rotary_q_per_row = c.causal || bounds(f.window_left) || bounds(f.window_right);
    p.q_unrotated = q_unrotated.data_ptr(), p.q_rotated = q.data_ptr();
    p.rotary_q_seqlen = seqlen_q, p.rotary_q_nheads = nheads;
  }
#if FLASHBUILD_HAS_FWD
  // Prefill-sized chunks on sm90: the Hopper forward takes the cache as dense K/V with seqused_k
  // (its mask cuts each row's keys; the V rows it loads past them are zeroed before P V), 2.3x the
  // split-KV kernel from 128 queries on (benchmarks/decode/README.md, "Chunked prefill"), where decode
  // (one query) is the split-KV kernel's. Only a plain cache call goes there: nothing to append or
  // rotate, no batch index or left padding, a page table only at head dims 32-128 (fwd_kernel_pages),
  // and num_splits left to the binding (0), over a cache that holds keys (the Hopper forward takes no call
  // without). The build must hold the forward variant; without it the split-KV kernel serves the call as before.
  if (c.arch >= 90 && seqlen_q >= kPrefillRowsOnFwdKernel && g.capacity > 0 && num_splits == 0 && !a.k && !g.rotary_dim &&
      (!g.paged || fwd_kernel_pages(c.hdim)) && !a.cache_batch_idx && !a.cache_leftpad && !pack) {
    std::optional<Call> fwd;
    try {
      fwd = resolve("fwd", q_in, c.causal, softmax_scale, f, seqlen_q, g.capacity);
    } catch (const VariantNotBuilt&) {
    }
    if (fwd) {
      const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
      ci = checked_indices(p, a, g, batch, k.size(0), q);
#if FLASHBUILD_HAS_SPLITKV
      // The split-KV launch with no query rows runs its first steps alone (common/splitkv_checks.h,
      // splitkv_has_rows): the index check, so the forward kernel reads checked indices too.
      FwdParams prologue = p;
      prologue.seqlen_q = 0;
      FLASHBUILD_DISPATCH(c, run_splitkv<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(prologue, stream));
#endif
      FLASHBUILD_DISPATCH(*fwd, run_fwd<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(p, stream));
      return {unpad(out, c), lse};
    }
  }
#endif
  const int num_sms = device_attribute(q, cudaDevAttrMultiProcessorCount);
  // The Hopper split-KV (sm90, head dims 32-128: hopper/splitkv_launch.h, 64-row tiles, two CTAs an SM) fills one
  // wave of its persistent CTAs (choose_num_splits_hopper); the Ampere path's kernel two CTAs per SM.
  const bool hopper_splitkv = c.arch >= 90 && hopper_splitkv_head_dim(c.hdim);
  p.num_splits = num_splits > 0 ? int(num_splits)
                 : hopper_splitkv ? choose_num_splits_hopper(batch, p.nheads, p.seqlen_q, p.seqlen_k, c.hdim, num_sms)
                                  : choose_num_splits(batch, p.nheads, p.seqlen_q, p.seqlen_k, c.hdim, num_sms);
  // The splits' fp32 partials: O (num_splits, batch, nheads, seqlen_q, hdim) then the LSEs (num_splits, batch,
  // nheads, seqlen_q), one block of torch's allocator, not a tensor (a decoding call's host time is its own:
  // benchmarks/decode_host_allocs/README.md), returned to it, ordered on this stream, when the call returns. O's part
  // is a whole number of hdim-float rows, so the LSEs start 16-byte aligned.
  c10::DataPtr partials;
  if (p.num_splits > 1) {
    const int64_t rows = int64_t(p.num_splits) * batch * p.nheads * p.seqlen_q;
    partials = c10::cuda::CUDACachingAllocator::get()->allocate(size_t(rows * (c.hdim + 1)) * sizeof(float));
    p.o_accum = static_cast<float*>(partials.get());
    p.lse_accum = p.o_accum + rows * c.hdim;
  }
#if FLASHBUILD_HAS_SPLITKV
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  // Nothing appended (the append kernel reads checked indices), on the Hopper split-KV: one launch. Its splits
  // merge in the kernel when the counters of the call's query blocks fit the buffer (else the combine kernel).
  // A call with no query rows launches no attention kernel, so the check kernel stays to report its bad values.
  const SplitKVPath path = hopper_splitkv ? splitkv_path() : SplitKVPath{};
  splitkv_descriptor_cache_on().store(path.keep_descriptors, std::memory_order_relaxed);
  const bool at_read = hopper_splitkv && !a.k && p.seqlen_q > 0 && p.nheads > 0 && !path.previous;
  if (!at_read) {
    ci = checked_indices(p, a, g, batch, k.size(0), q);
  } else {
    read_indices_at_use(p, a, g, k.size(0), q);
    p.split_merge = path.merge;
    p.dependent_launch = path.dependent_launch;
    // Two K/V heads a CTA at head dim 64 where the launch finds the call laid out for it (packed GQA rows, the
    // split count left to it: it picks the pairs' own).
    p.pair_heads = path.pairs && pack && num_splits == 0;
    const int64_t query_blocks = int64_t(batch) * p.nheads * ((p.seqlen_q + kSplitKVBlockM - 1) / kSplitKVBlockM);
    if (p.num_splits > 1 && query_blocks <= kSplitCounterSlots) p.split_counters = split_counters(q.get_device(), stream);
  }
  FLASHBUILD_DISPATCH(c, run_splitkv<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(p, stream));
#endif
  if (g.seqlen_new && c.hdim != c.user_hdim) {
    write_back_appended(k_cache, k, ci, g, batch);
    write_back_appended(v_cache, v, ci, g, batch);
  }
  return {unpad(out, c), lse};
}

// Gradients of flash_attn_func. out and lse are the forward's outputs for the same call. deterministic:
// bit-identical dq from run to run (BwdParams::dq_semaphore; dk and dv, written once per key block and
// query head and summed over a GQA group by gqa_sum, are so either way).
std::vector<at::Tensor> bwd_impl(const char* kind, const at::Tensor& dout_in, const at::Tensor& q_in,
                                 const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& out_in,
                                 const at::Tensor& lse, bool causal, std::optional<double> softmax_scale,
                                 const at::Tensor* cu_seqlens_q, const at::Tensor* cu_seqlens_k, int max_seqlen_q,
                                 int max_seqlen_k, const FeatureArgs& f, bool deterministic) {
  TORCH_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(),
              "flashbuild: dout and out must have the shape of q ", q_in.sizes(), "; got ", dout_in.sizes(), " and ",
              out_in.sizes(), " (", kind, ")");
  TORCH_CHECK(dout_in.device() == q_in.device() && out_in.device() == q_in.device(),
              "flashbuild: dout and out must be on q's device ", q_in.device(), " (got ", dout_in.device(), " and ",
              out_in.device(), "); move them with .to(q.device)");
  TORCH_CHECK(dout_in.scalar_type() == q_in.scalar_type() && out_in.scalar_type() == q_in.scalar_type(),
              "flashbuild: dout and out must have q's dtype ", q_in.scalar_type(), " (got ", dout_in.scalar_type(),
              " and ", out_in.scalar_type(), "); convert dout with .to(q.dtype)");
  const bool varlen = cu_seqlens_q != nullptr;
  const std::vector<int64_t> lse_shape =
      varlen ? std::vector<int64_t>{q_in.size(1), q_in.size(0)} : std::vector<int64_t>{q_in.size(0), q_in.size(2), q_in.size(1)};
  TORCH_CHECK(lse.scalar_type() == at::kFloat && lse.sizes() == at::IntArrayRef(lse_shape),
              "flashbuild: lse must be float32 ", at::IntArrayRef(lse_shape), " as the forward returns it; got ",
              lse.scalar_type(), " ", lse.sizes());
  TORCH_CHECK(lse.device() == q_in.device(), "flashbuild: lse must be on q's device ", q_in.device(), " (got ",
              lse.device(), "); pass the forward's lse, or move it with .to(q.device)");
  Call c = varlen ? resolve("bwd", q_in, causal, softmax_scale, f, max_seqlen_q, max_seqlen_k)
                  : resolve("bwd", q_in, causal, softmax_scale, f, q_in.size(1), k_in.size(1));
  if (deterministic) use_deterministic_kernel(c);
  c10::cuda::CUDAGuard device_guard(q_in.device());
  const at::Tensor q = pad_head_dim(q_in, c.hdim), k = pad_head_dim(k_in, c.hdim), v = pad_head_dim(v_in, c.hdim);
  const at::Tensor dout = pad_head_dim(dout_in.stride(-1) == 1 ? dout_in : dout_in.contiguous(), c.hdim);
  const int nheads = q.size(-2), nheads_k = k.size(-2);

  const at::Tensor out = out_in.stride(-1) == 1 ? out_in : out_in.contiguous();
  const at::Tensor lse_c = lse.contiguous();
  at::Tensor dsum = at::empty_like(lse_c);  // rowsum(dO * O), laid out like the LSE
  auto expanded = k.sizes().vec();
  expanded[expanded.size() - 2] = nheads;
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(expanded, q.options());
  at::Tensor dv = at::empty(expanded, q.options());
  // No queries or no keys (for packed calls: in any sequence, checked_offsets bounding them by the maxima).
  const bool empty = varlen ? q.size(0) == 0 || k.size(0) == 0 || max_seqlen_q == 0 || max_seqlen_k == 0
                            : q.size(1) == 0 || k.size(1) == 0;
  if (empty) return empty_call_grads(dq, dk, dv, nheads_k, c);
  // dq_accum: each (batch, head) sequence's rows back to back with kDqAccumRowPad rows of slack, so
  // that the kernel's last query block is whole (params.h).
  const int64_t pad = flashbuild::kDqAccumRowPad;
  const at::Tensor dq_accum =
      varlen ? at::zeros({nheads, q.size(0) + pad * (cu_seqlens_q->size(0) - 1), c.hdim}, q.options().dtype(at::kFloat))
             : at::zeros({q.size(0), nheads, (q.size(1) + pad - 1) / pad * pad, c.hdim}, q.options().dtype(at::kFloat));

  BwdParams p{};
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.dout = dout.data_ptr(), p.o = out.data_ptr();
  p.lse = lse_c.data_ptr<float>(), p.dsum = dsum.data_ptr<float>(), p.dq_accum = dq_accum.data_ptr<float>();
  p.dq = dq.data_ptr();
  p.dk = dk.data_ptr(), p.dv = dv.data_ptr();
  const Strides sq = strides_of(q), sk = strides_of(k), sv = strides_of(v), sdo = strides_of(dout);
  const Strides so = strides_of(out), sdq = strides_of(dq), sdk = strides_of(dk);
  p.o_batch_stride = so.batch, p.o_row_stride = so.row, p.o_head_stride = so.head;
  p.q_batch_stride = sq.batch, p.q_row_stride = sq.row, p.q_head_stride = sq.head;
  p.k_batch_stride = sk.batch, p.k_row_stride = sk.row, p.k_head_stride = sk.head;
  p.v_batch_stride = sv.batch, p.v_row_stride = sv.row, p.v_head_stride = sv.head;
  p.do_batch_stride = sdo.batch, p.do_row_stride = sdo.row, p.do_head_stride = sdo.head;
  p.dq_out_batch_stride = sdq.batch, p.dq_out_row_stride = sdq.row, p.dq_out_head_stride = sdq.head;
  p.dq_batch_stride = varlen ? 0 : dq_accum.stride(0);
  p.dq_head_stride = varlen ? dq_accum.stride(0) : dq_accum.stride(1);
  p.dk_batch_stride = sdk.batch, p.dk_row_stride = sdk.row, p.dk_head_stride = sdk.head;
  p.lse_batch_stride = varlen ? 0 : lse_c.stride(0);
  p.lse_head_stride = varlen ? lse_c.stride(0) : lse_c.stride(1);
  if (varlen) {
    p.cu_seqlens_q = cu_seqlens_q->data_ptr<int>();
    p.cu_seqlens_k = cu_seqlens_k->data_ptr<int>();
    p.batch = cu_seqlens_q->size(0) - 1, p.seqlen_q = max_seqlen_q, p.seqlen_k = max_seqlen_k;
    p.total_q = q.size(0), p.total_k = k.size(0);
  } else {
    p.batch = q.size(0), p.seqlen_q = q.size(1), p.seqlen_k = k.size(1);
  }
  p.nheads = nheads, p.nheads_k = nheads_k, p.head_dim = c.hdim, p.o_head_dim = c.user_hdim;
  p.softmax_scale = c.softmax_scale;
  p.softmax_scale_log2 = c.softmax_scale * kLog2e;
  set_features(p, c);
  // Deterministic mode: one zeroed int32 counter per (batch, head, query block), sized by the longest
  // sequence for varlen (params.h, BwdParams::dq_semaphore); kept alive to the end of this call, as
  // dq_accum is (the stream orders the kernels before any reuse of the memory).
  at::Tensor dq_semaphore;
  if (deterministic) {
    dq_semaphore = at::zeros({p.batch, nheads, dq_semaphore_blocks(p.seqlen_q)}, q.options().dtype(at::kInt));
    p.dq_semaphore = dq_semaphore.data_ptr<int>();
  }

#if FLASHBUILD_HAS_BWD
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  FLASHBUILD_DISPATCH(c, run_bwd<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(p, stream));
#endif
  return {unpad(dq, c), unpad(gqa_sum(dk, nheads_k), c), unpad(gqa_sum(dv, nheads_k), c)};
}

std::vector<at::Tensor> mha_bwd(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& out, const at::Tensor& lse, bool causal,
                                std::optional<double> softmax_scale, const FeatureArgs& f, bool deterministic) {
  check_qkv(q, k, v);
  raise_index_error(q.get_device());
  return bwd_impl("mha_bwd", dout, q, k, v, out, lse, causal, softmax_scale, nullptr, nullptr, 0, 0, f,
                  deterministic);
}

std::vector<at::Tensor> mha_varlen_bwd(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                       const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                       int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal,
                                       std::optional<double> softmax_scale, const FeatureArgs& f,
                                       bool deterministic) {
  check_varlen_qkv(q, k, v);
  check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q);
  check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", q);
  TORCH_CHECK(cu_seqlens_q.size(0) == cu_seqlens_k.size(0), "flashbuild: cu_seqlens_q and cu_seqlens_k must have "
              "the same length (batch + 1); got ", cu_seqlens_q.size(0), " and ", cu_seqlens_k.size(0));
  check_max_seqlen(max_seqlen_q, "max_seqlen_q");
  check_max_seqlen(max_seqlen_k, "max_seqlen_k");
  raise_index_error(q.get_device());
  c10::cuda::CUDAGuard device_guard(q.device());
  const at::Tensor cu_q = checked_offsets(cu_seqlens_q, IndexArg::kCuSeqlensQ, q.size(0), max_seqlen_q);
  const at::Tensor cu_k = checked_offsets(cu_seqlens_k, IndexArg::kCuSeqlensK, k.size(0), max_seqlen_k);
  return bwd_impl("mha_varlen_bwd", dout, q, k, v, out, lse, causal, softmax_scale, &cu_q, &cu_k,
                  int(max_seqlen_q), int(max_seqlen_k), f, deterministic);
}

// Raises a bad index value the device recorded (the record says which call's argument), after waiting
// for the current stream's work when `synchronize` (the one place flashbuild synchronizes on purpose: a
// caller asks for it, e.g. after replaying a CUDA graph). Without a device, the current one.
void check_errors(std::optional<int64_t> device, bool synchronize) {
  int index = 0;
  if (device) {
    index = int(*device);
  } else {
    C10_CUDA_CHECK(cudaGetDevice(&index));
  }
  if (synchronize) {
    C10_CUDA_CHECK(cudaStreamSynchronize(c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(index)).stream()));
  }
  raise_index_error(index);
}

std::vector<std::string> variants() { return {std::begin(table::kVariants), std::end(table::kVariants)}; }

std::vector<std::string> features() {
  return {std::begin(table::kFeatures), std::begin(table::kFeatures) + table::kNumFeatures};
}

}  // namespace flashbuild

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "flashbuild attention kernels (a selective build; see variants())";
  static py::exception<flashbuild::VariantNotBuilt> fallback(m, "VariantNotBuiltError", PyExc_RuntimeError);
  static py::exception<flashbuild::InvalidIndex> index_fallback(m, "InvalidIndexError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const flashbuild::VariantNotBuilt& err) {
      // Prefer the package's own class so `except flashbuild.VariantNotBuiltError` works.
      PyObject* cls = nullptr;
      try {
        cls = py::module_::import("flashbuild.errors").attr("VariantNotBuiltError").ptr();
      } catch (...) {
        PyErr_Clear();
        cls = fallback.ptr();
      }
      PyErr_SetString(cls, err.what());
    } catch (const flashbuild::InvalidIndex& err) {
      PyObject* cls = nullptr;
      try {
        cls = py::module_::import("flashbuild.errors").attr("InvalidIndexError").ptr();
      } catch (...) {
        PyErr_Clear();
        cls = index_fallback.ptr();
      }
      PyErr_SetString(cls, err.what());
    }
  });
  // flash-attn's window_size = (left, right) and softcap, as three keyword arguments of every call.
  auto feature_args = [](int64_t left, int64_t right, double softcap) {
    return flashbuild::FeatureArgs{left, right, softcap};
  };
  m.def(
      "flash_attn_func",
      [=](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
          std::optional<double> softmax_scale, bool return_lse, int64_t window_size_left, int64_t window_size_right,
          double softcap) -> py::object {
        auto r = flashbuild::mha_fwd(q, k, v, causal, softmax_scale,
                                     feature_args(window_size_left, window_size_right, softcap));
        if (return_lse) return py::make_tuple(r[0], r[1]);
        return py::cast(r[0]);
      },
      "Attention over (batch, seqlen, nheads, head_dim) tensors, like flash_attn.flash_attn_func. Returns out, "
      "or (out, lse) with return_lse=True; lse is (batch, nheads, seqlen_q) float32. window_size_left/right: "
      "a local window (-1 = unbounded); softcap: scores become softcap * tanh(scores / softcap) (0 = off).",
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = false, py::arg("softmax_scale") = py::none(),
      py::arg("return_lse") = false, py::arg("window_size_left") = -1, py::arg("window_size_right") = -1,
      py::arg("softcap") = 0.0);
  m.def(
      "mha_bwd",
      [=](const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
          const at::Tensor& lse, bool causal, std::optional<double> softmax_scale, int64_t window_size_left,
          int64_t window_size_right, double softcap, bool deterministic) {
        return flashbuild::mha_bwd(dout, q, k, v, out, lse, causal, softmax_scale,
                                   feature_args(window_size_left, window_size_right, softcap), deterministic);
      },
      "Gradients (dq, dk, dv) of flash_attn_func given dout and the forward's out and lse. deterministic=True: "
      "bit-identical results from run to run (dQ added in a fixed order; slower).", py::arg("dout"),
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("causal") = false,
      py::arg("softmax_scale") = py::none(), py::arg("window_size_left") = -1, py::arg("window_size_right") = -1,
      py::arg("softcap") = 0.0, py::arg("deterministic") = false);
  m.def(
      "mha_varlen_fwd",
      [=](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
          const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal,
          std::optional<double> softmax_scale, int64_t window_size_left, int64_t window_size_right, double softcap) {
        return flashbuild::mha_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                                          softmax_scale, feature_args(window_size_left, window_size_right, softcap));
      },
      "Attention over packed sequences: q (total_q, nheads, head_dim), k/v (total_k, nheads_k, head_dim), "
      "cu_seqlens int32 (batch + 1). Returns [out, lse], lse (nheads, total_q) float32.",
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens_q"), py::arg("cu_seqlens_k"),
      py::arg("max_seqlen_q"), py::arg("max_seqlen_k"), py::arg("causal") = false,
      py::arg("softmax_scale") = py::none(), py::arg("window_size_left") = -1, py::arg("window_size_right") = -1,
      py::arg("softcap") = 0.0);
  m.def(
      "mha_varlen_bwd",
      [=](const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
          const at::Tensor& lse, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
          int64_t max_seqlen_k, bool causal, std::optional<double> softmax_scale, int64_t window_size_left,
          int64_t window_size_right, double softcap, bool deterministic) {
        return flashbuild::mha_varlen_bwd(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                          max_seqlen_k, causal, softmax_scale,
                                          feature_args(window_size_left, window_size_right, softcap), deterministic);
      },
      "Gradients [dq, dk, dv] of mha_varlen_fwd; deterministic as in mha_bwd.", py::arg("dout"), py::arg("q"),
      py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("cu_seqlens_q"), py::arg("cu_seqlens_k"),
      py::arg("max_seqlen_q"), py::arg("max_seqlen_k"), py::arg("causal") = false,
      py::arg("softmax_scale") = py::none(), py::arg("window_size_left") = -1, py::arg("window_size_right") = -1,
      py::arg("softcap") = 0.0, py::arg("deterministic") = false);
  m.def(
      "mha_fwd_kvcache",
      [=](const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
          const std::optional<at::Tensor>& cache_seqlens, bool causal, std::optional<double> softmax_scale,
          int64_t num_splits, int64_t window_size_left, int64_t window_size_right, double softcap,
          const std::optional<at::Tensor>& k, const std::optional<at::Tensor>& v,
          const std::optional<at::Tensor>& rotary_cos, const std::optional<at::Tensor>& rotary_sin,
          const std::optional<at::Tensor>& cache_batch_idx, const std::optional<at::Tensor>& cache_leftpad,
          const std::optional<at::Tensor>& block_table, bool rotary_interleaved) {
        const flashbuild::KVCacheArgs args{k, v, cache_seqlens, rotary_cos, rotary_sin, cache_batch_idx,
                                           cache_leftpad, block_table, rotary_interleaved};
        return flashbuild::mha_fwd_kvcache(q, k_cache, v_cache, args, causal, softmax_scale, num_splits,
                                           feature_args(window_size_left, window_size_right, softcap));
      },
      "Decoding: q (batch, seqlen_q, nheads, head_dim) against k_cache/v_cache (batch, seqlen_cache, nheads_k, "
      "head_dim), the first cache_seqlens[b] keys of each row (all when None); split-KV with num_splits splits "
      "(0: chosen from the SM count). k/v (batch, seqlen_new, nheads_k, head_dim) are first written into the "
      "cache in place at rows cache_seqlens[b].., then attended to; rotary_cos/rotary_sin (seqlen_ro, rotary_dim / "
      "2) rotate them and q (rotary_interleaved: GPT-J pairs, else GPT-NeoX halves); cache_batch_idx picks cache "
      "rows, cache_leftpad skips leading rows, block_table (batch, max_pages) reads a paged cache "
      "(num_pages, page_size, nheads_k, head_dim). Returns [out, lse]. Int tensors are int32 on q's device.",
      py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("cache_seqlens") = py::none(),
      py::arg("causal") = false, py::arg("softmax_scale") = py::none(), py::arg("num_splits") = 0,
      py::arg("window_size_left") = -1, py::arg("window_size_right") = -1, py::arg("softcap") = 0.0,
      py::arg("k") = py::none(), py::arg("v") = py::none(), py::arg("rotary_cos") = py::none(),
      py::arg("rotary_sin") = py::none(), py::arg("cache_batch_idx") = py::none(),
      py::arg("cache_leftpad") = py::none(), py::arg("block_table") = py::none(),
      py::arg("rotary_interleaved") = true);
  m.def("check_errors", &flashbuild::check_errors,
        "Raises InvalidIndexError for a bad index value (cache_seqlens, cache_batch_idx, cache_leftpad, block_table, "
        "cu_seqlens) that an earlier call's kernels found on the device (clamped: they never touch memory outside "
        "the tensors). Every call checks at its start without synchronizing; this waits for the current stream "
        "first when synchronize=True (after a CUDA graph replay, say).",
        py::arg("device") = py::none(), py::arg("synchronize") = true);
  m.def("variants", &flashbuild::variants, "The variants this build holds, by canonical name.");
  m.def("features", &flashbuild::features, "The features compiled into this build (local, softcap).");
  m.def("build_key", [] { return std::string(flashbuild::build_table::kBuildKey); });
}
