// The torch binding: the only translation unit that includes torch. It validates the call, finds
// the variant the call needs, checks that this build holds it (the compiled-in table), and launches
// it through the narrowed dispatch switches.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <algorithm>
#include <string>
#include <vector>

#include "flash/params.h"
#include "flashbuild_dispatch.h"
#include "flashbuild_table.h"

namespace flashbuild {

namespace table = build_table;

constexpr int kKernelHeadDims[] = {32, 64, 96, 128, 192, 256};

inline std::string to_text(int v) { return std::to_string(v); }
inline std::string to_text(const char* v) { return v; }

// Raised as flashbuild.errors.VariantNotBuiltError (a RuntimeError) in Python.
class VariantNotBuilt : public std::runtime_error {
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

std::string variant_name(const char* direction, int hdim, const char* dtype, bool causal, int arch) {
  return std::string(direction) + "_hdim" + std::to_string(hdim) + "_" + dtype + (causal ? "_causal" : "") + "_sm" +
         std::to_string(arch);
}

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

// The message for a call this build cannot serve: what was asked, what the build holds, and the
// command that builds both.
[[noreturn]] void variant_not_built(const std::string& asked, const char* direction, int hdim, int user_hdim,
                                    const char* dtype, bool causal, int arch) {
  std::string msg = "flashbuild: this build has no kernel " + asked + " (asked: " + direction + ", head dim " +
                    std::to_string(user_hdim);
  if (user_hdim != hdim) msg += " -> runs on the hdim-" + std::to_string(hdim) + " kernel, padded";
  msg += std::string(", ") + dtype + ", " + (causal ? "causal" : "non-causal") + ", sm" + std::to_string(arch) +
         "). It holds: ";
  for (int i = 0; i < table::kNumVariants; ++i) msg += std::string(i ? ", " : "") + table::kVariants[i];
  bool any_causal = causal, any_noncausal = !causal;
  for (bool c : table::kCausal) {
    any_causal = any_causal || c;
    any_noncausal = any_noncausal || !c;
  }
  const char* causal_flag = any_causal && any_noncausal ? "both" : (any_causal ? "on" : "off");
  const char* asked_dtype = dtype;
  const char* asked_direction = direction;
  msg += ". Build one that holds it with: flashbuild --hdim " + axis_with(table::kHeadDims, hdim) + " --dtype " +
         axis_with(table::kDTypes, asked_dtype) + " --arch " + axis_with(table::kArchs, arch, "sm") +
         " --direction " + axis_with(table::kDirections, asked_direction) + " --causal " + causal_flag;
  throw VariantNotBuilt(msg);
}

int kernel_head_dim(int hdim) {
  for (int k : kKernelHeadDims) {
    if (hdim <= k) return k;
  }
  TORCH_CHECK(false, "flashbuild: head dim ", hdim, " is larger than the largest kernel head dim, 256");
}

// The built arch that runs on this device: the exact one, else an older one of the same major
// (sm80 machine code runs on sm86 and sm89).
int device_arch(const at::Tensor& t) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(t.get_device());
  const int cc = prop->major * 10 + prop->minor;
  int best = -1;
  for (int a : table::kArchs) {
    if (a == cc) return a;
    if (a / 10 == cc / 10 && a < cc && a > best) best = a;
  }
  return best >= 0 ? best : cc;
}

void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.is_cuda() && k.is_cuda() && v.is_cuda(), "flashbuild: q, k and v must be CUDA tensors (got ",
              q.device(), ", ", k.device(), ", ", v.device(), ")");
  TORCH_CHECK(q.device() == k.device() && q.device() == v.device(),
              "flashbuild: q, k and v must be on the same device");
  const auto dt = q.scalar_type();
  TORCH_CHECK(dt == at::kHalf || dt == at::kBFloat16, "flashbuild: q must be float16 or bfloat16, got ", dt,
              "; convert with q.half() or q.bfloat16()");
  TORCH_CHECK(k.scalar_type() == dt && v.scalar_type() == dt, "flashbuild: q, k and v must share one dtype (got ",
              dt, ", ", k.scalar_type(), ", ", v.scalar_type(), ")");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "flashbuild: q, k, v must be 4-D (batch, seqlen, nheads, head_dim); got ", q.sizes(), ", ",
              k.sizes(), ", ", v.sizes());
  TORCH_CHECK(q.size(0) == k.size(0) && k.sizes() == v.sizes(), "flashbuild: k and v must have the same shape and "
              "the batch of q; got q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  TORCH_CHECK(q.size(3) == k.size(3), "flashbuild: q and k must have the same head dim; got ", q.size(3), " and ",
              k.size(3));
  TORCH_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0, "flashbuild: the number of query heads (", q.size(2),
              ") must be a multiple of the number of key/value heads (", k.size(2), ")");
  TORCH_CHECK(q.size(3) > 0 && q.size(3) <= 256, "flashbuild: head dim must be in 1..256, got ", q.size(3));
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->stride(-1) == 1, "flashbuild: the last dimension of q, k and v must be contiguous; call "
                ".contiguous() first (got strides ", t->strides(), ")");
  }
}

// Pads the head dim with zeros up to the kernel size: Q·K^T and the first columns of P·V do not change.
at::Tensor pad_head_dim(const at::Tensor& t, int kernel_hdim) {
  if (t.size(3) == kernel_hdim) return t;
  return at::constant_pad_nd(t, {0, kernel_hdim - t.size(3)}, 0);
}

}  // namespace

std::vector<at::Tensor> mha_fwd(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, bool causal,
                                std::optional<double> softmax_scale) {
  check_qkv(q_in, k_in, v_in);
  const int user_hdim = q_in.size(3);
  const int hdim = kernel_head_dim(user_hdim);
  const bool is_fp16 = q_in.scalar_type() == at::kHalf;
  const char* dtype = is_fp16 ? "fp16" : "bf16";
  const int arch = device_arch(q_in);
  const std::string asked = variant_name("fwd", hdim, dtype, causal, arch);
#if FLASHBUILD_HAS_FWD
  if (!holds(asked)) variant_not_built(asked, "fwd", hdim, user_hdim, dtype, causal, arch);
#else
  variant_not_built(asked, "fwd", hdim, user_hdim, dtype, causal, arch);
#endif

  c10::cuda::CUDAGuard device_guard(q_in.device());
  const at::Tensor q = pad_head_dim(q_in, hdim);
  const at::Tensor k = pad_head_dim(k_in, hdim);
  const at::Tensor v = pad_head_dim(v_in, hdim);
  const int batch = q.size(0), seqlen_q = q.size(1), nheads = q.size(2);
  const int seqlen_k = k.size(1), nheads_k = k.size(2);
  at::Tensor out = at::empty({batch, seqlen_q, nheads, hdim}, q.options());
  at::Tensor lse = at::empty({batch, nheads, seqlen_q}, q.options().dtype(at::kFloat));

  FwdParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.o = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.q_batch_stride = q.stride(0), p.q_row_stride = q.stride(1), p.q_head_stride = q.stride(2);
  p.k_batch_stride = k.stride(0), p.k_row_stride = k.stride(1), p.k_head_stride = k.stride(2);
  p.v_batch_stride = v.stride(0), p.v_row_stride = v.stride(1), p.v_head_stride = v.stride(2);
  p.o_batch_stride = out.stride(0), p.o_row_stride = out.stride(1), p.o_head_stride = out.stride(2);
  p.batch = batch, p.seqlen_q = seqlen_q, p.seqlen_k = seqlen_k;
  p.nheads = nheads, p.nheads_k = nheads_k, p.head_dim = hdim;
  p.softmax_scale = softmax_scale ? float(*softmax_scale) : 1.0f / std::sqrt(float(user_hdim));
  p.softmax_scale_log2 = p.softmax_scale * 1.4426950408889634f;

#if FLASHBUILD_HAS_FWD
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  ARCH_SWITCH(arch, [&] {
    HEADDIM_SWITCH(hdim, [&] {
      FP16_SWITCH(is_fp16, [&] {
        CAUSAL_SWITCH(causal, [&] { run_fwd<kArch, kHeadDim, kDType, kIsCausal>(p, stream); });
      });
    });
  });
#endif
  if (hdim != user_hdim) out = out.narrow(3, 0, user_hdim);
  return {out, lse};
}

// Gradients of flash_attn_func. out and lse are the forward's outputs for the same call.
std::vector<at::Tensor> mha_bwd(const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in,
                                const at::Tensor& v_in, const at::Tensor& out_in, const at::Tensor& lse, bool causal,
                                std::optional<double> softmax_scale) {
  check_qkv(q_in, k_in, v_in);
  TORCH_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(),
              "flashbuild: dout and out must have the shape of q ", q_in.sizes(), "; got ", dout_in.sizes(), " and ",
              out_in.sizes());
  TORCH_CHECK(dout_in.scalar_type() == q_in.scalar_type() && out_in.scalar_type() == q_in.scalar_type(),
              "flashbuild: dout and out must have q's dtype");
  TORCH_CHECK(lse.scalar_type() == at::kFloat && lse.dim() == 3 && lse.size(0) == q_in.size(0) &&
                  lse.size(1) == q_in.size(2) && lse.size(2) == q_in.size(1),
              "flashbuild: lse must be float32 (batch, nheads, seqlen_q) as the forward returns it; got ", lse.sizes());
  const int user_hdim = q_in.size(3);
  const int hdim = kernel_head_dim(user_hdim);
  const bool is_fp16 = q_in.scalar_type() == at::kHalf;
  const char* dtype = is_fp16 ? "fp16" : "bf16";
  const int arch = device_arch(q_in);
  const std::string asked = variant_name("bwd", hdim, dtype, causal, arch);
#if FLASHBUILD_HAS_BWD
  if (!holds(asked)) variant_not_built(asked, "bwd", hdim, user_hdim, dtype, causal, arch);
#else
  variant_not_built(asked, "bwd", hdim, user_hdim, dtype, causal, arch);
#endif

  c10::cuda::CUDAGuard device_guard(q_in.device());
  const at::Tensor q = pad_head_dim(q_in, hdim);
  const at::Tensor k = pad_head_dim(k_in, hdim);
  const at::Tensor v = pad_head_dim(v_in, hdim);
  const at::Tensor dout = pad_head_dim(dout_in.stride(-1) == 1 ? dout_in : dout_in.contiguous(), hdim);
  const int batch = q.size(0), seqlen_q = q.size(1), nheads = q.size(2);
  const int seqlen_k = k.size(1), nheads_k = k.size(2);
  const float scale = softmax_scale ? float(*softmax_scale) : 1.0f / std::sqrt(float(user_hdim));

  // rowsum(dO * O) in fp32, laid out like the LSE. Padding columns of dO are zero.
  const at::Tensor dsum = (dout_in.to(at::kFloat) * out_in.to(at::kFloat)).sum(-1).transpose(1, 2).contiguous();
  const at::Tensor lse_c = lse.contiguous();
  at::Tensor dq_accum = at::zeros({batch, seqlen_q, nheads, hdim}, q.options().dtype(at::kFloat));
  at::Tensor dk = at::empty({batch, seqlen_k, nheads, hdim}, q.options());
  at::Tensor dv = at::empty({batch, seqlen_k, nheads, hdim}, q.options());

  BwdParams p{};
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.dout = dout.data_ptr();
  p.lse = lse_c.data_ptr<float>(), p.dsum = dsum.data_ptr<float>(), p.dq_accum = dq_accum.data_ptr<float>();
  p.dk = dk.data_ptr(), p.dv = dv.data_ptr();
  p.q_batch_stride = q.stride(0), p.q_row_stride = q.stride(1), p.q_head_stride = q.stride(2);
  p.k_batch_stride = k.stride(0), p.k_row_stride = k.stride(1), p.k_head_stride = k.stride(2);
  p.v_batch_stride = v.stride(0), p.v_row_stride = v.stride(1), p.v_head_stride = v.stride(2);
  p.do_batch_stride = dout.stride(0), p.do_row_stride = dout.stride(1), p.do_head_stride = dout.stride(2);
  p.dq_batch_stride = dq_accum.stride(0), p.dq_row_stride = dq_accum.stride(1), p.dq_head_stride = dq_accum.stride(2);
  p.dk_batch_stride = dk.stride(0), p.dk_row_stride = dk.stride(1), p.dk_head_stride = dk.stride(2);
  p.batch = batch, p.seqlen_q = seqlen_q, p.seqlen_k = seqlen_k;
  p.nheads = nheads, p.nheads_k = nheads_k, p.head_dim = hdim;
  p.softmax_scale = scale;
  p.softmax_scale_log2 = scale * 1.4426950408889634f;

#if FLASHBUILD_HAS_BWD
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  ARCH_SWITCH(arch, [&] {
    HEADDIM_SWITCH(hdim, [&] {
      FP16_SWITCH(is_fp16, [&] {
        CAUSAL_SWITCH(causal, [&] { run_bwd<kArch, kHeadDim, kDType, kIsCausal>(p, stream); });
      });
    });
  });
#endif
  at::Tensor dq = dq_accum.mul_(scale).to(q.scalar_type());
  if (nheads != nheads_k) {
    // dK and dV of a K/V head are the sums over the query heads that share it (in fp32).
    const int group = nheads / nheads_k;
    dk = dk.view({batch, seqlen_k, nheads_k, group, hdim}).to(at::kFloat).sum(3).to(q.scalar_type());
    dv = dv.view({batch, seqlen_k, nheads_k, group, hdim}).to(at::kFloat).sum(3).to(q.scalar_type());
  }
  if (hdim != user_hdim) {
    dq = dq.narrow(3, 0, user_hdim);
    dk = dk.narrow(3, 0, user_hdim);
    dv = dv.narrow(3, 0, user_hdim);
  }
  return {dq, dk, dv};
}

std::vector<std::string> variants() { return {std::begin(table::kVariants), std::end(table::kVariants)}; }

}  // namespace flashbuild

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "flashbuild attention kernels (a selective build; see variants())";
  static py::exception<flashbuild::VariantNotBuilt> fallback(m, "VariantNotBuiltError", PyExc_RuntimeError);
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
    }
  });
  m.def(
      "flash_attn_func",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
         std::optional<double> softmax_scale, bool return_lse) -> py::object {
        auto r = flashbuild::mha_fwd(q, k, v, causal, softmax_scale);
        if (return_lse) return py::make_tuple(r[0], r[1]);
        return py::cast(r[0]);
      },
      "Attention over (batch, seqlen, nheads, head_dim) tensors, like flash_attn.flash_attn_func. Returns out, "
      "or (out, lse) with return_lse=True; lse is (batch, nheads, seqlen_q) float32.",
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = false, py::arg("softmax_scale") = py::none(),
      py::arg("return_lse") = false);
  m.def("mha_bwd", &flashbuild::mha_bwd,
        "Gradients (dq, dk, dv) of flash_attn_func given dout and the forward's out and lse.", py::arg("dout"),
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("causal") = false,
        py::arg("softmax_scale") = py::none());
  m.def("variants", &flashbuild::variants, "The variants this build holds, by canonical name.");
  m.def("build_key", [] { return std::string(flashbuild::build_table::kBuildKey); });
}
