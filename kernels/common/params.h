// The contract between the torch binding and every kernel family: plain structs and the launch
// entry points. Torch-free on purpose: kernel objects compile on machines with nvcc and no torch CUDA.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "common/splitkv_path.h"  // SplitMerge, DependentLaunch
#include "common/variant_space.h"  // DType, the Feature bits, the kernel head dims (generated from selection/space.py)

namespace flashbuild {

// DType (kFp16, kBf16) is declared in common/variant_space.h, with the dtype names.

// log2(e): the softmax runs in the exp2 domain (scale_log2 = scale * kLog2e).
constexpr float kLog2e = 1.4426950408889634f;

// Every kernel moves rows of Q, K, V, O and their gradients in 16-byte vectors (cp.async on the
// Ampere path, TMA on the Hopper one), so each base pointer, and each stride it steps by, must be a
// multiple of 16 bytes. A stride over an extent of 1 is never stepped. The binding copies a tensor
// that breaks this (a view at an odd element offset) before any launch: a misaligned vector access
// is a sticky CUDA error that poisons the process.
constexpr int64_t kVectorBytes = 16;

// (stride, extent) pairs in elements of elem_bytes.
inline bool vector_addressable(const void* ptr, int64_t elem_bytes,
                               std::initializer_list<std::pair<int64_t, int64_t>> strides) {
  if (reinterpret_cast<uintptr_t>(ptr) % kVectorBytes != 0) { return false; }
  for (auto [stride, extent] : strides) {
    if (extent > 1 && (stride <= 0 || (stride * elem_bytes) % kVectorBytes != 0)) { return false; }
  }
  return true;
}

// CUDA caps gridDim.y and gridDim.z at 65535. The non-persistent launches put heads on y and the
// batch (times the splits, for split-KV) on z; a call past that is refused by name here, instead of
// "invalid configuration argument" from the launch.
constexpr int64_t kMaxGridYZ = 65535;

inline void check_grid_yz(const char* entry, int64_t nheads, int64_t batch_blocks, const char* batch_what = "batch") {
  if (nheads > kMaxGridYZ || batch_blocks > kMaxGridYZ) {
    throw std::runtime_error(std::string("flashbuild: ") + entry + " launches one CTA row per head and per " +
                             batch_what + ", and CUDA allows at most " + std::to_string(kMaxGridYZ) +
                             " of each; got nheads " + std::to_string(nheads) + ", " + batch_what + " " +
                             std::to_string(batch_blocks) + ". Split the call into batches of at most " +
                             std::to_string(kMaxGridYZ) + " sequences (and heads)");
  }
}

// The Hopper persistent kernels number their tiles (query blocks x heads x batch x splits) with an int, and a CTA's
// next tile is its tile plus the grid: a call with more tiles would wrap and leave most of its output unwritten
// (a packed batch of 65,537 sequences, the longest 128k rows, 64 heads, at 128-row blocks: 2^32 + 2^16 tiles, read
// as 65,536). Refused by name here, with the batch size that fits.
inline void check_tile_count(const char* entry, int64_t m_blocks, int64_t nheads, int64_t batch, int64_t splits,
                             int64_t grid) {
  const int64_t per_sequence = m_blocks * nheads * splits, room = int64_t(INT32_MAX) - grid;
  if (per_sequence > 0 && batch > room / per_sequence) {
    const int64_t fits = room / per_sequence;
    throw std::runtime_error(std::string("flashbuild: ") + entry + " numbers its tiles (query blocks x heads x " +
                             "batch x splits) with 32 bits; got " + std::to_string(m_blocks) + " x " +
                             std::to_string(nheads) + " x " + std::to_string(batch) + " x " + std::to_string(splits) +
                             ", more than " + std::to_string(room) + ". Split the call into batches of at most " +
                             (fits > 0 ? std::to_string(fits) + " sequences" : "fewer heads (one sequence is too many)"));
  }
}

// SplitMerge and DependentLaunch, how a Hopper split-KV call merges its splits and launches, are declared in
// common/splitkv_path.h with FLASHBUILD_SPLITKV_PATH, which picks them.

// A KV-cache call's index tensors as the caller gave them (null: not given), read by the check kernel
// alone (common/cache_index_check.h). Its ranges: cache_seqlens 0..capacity - seqlen_knew,
// cache_batch_idx 0..num_cache_rows - 1, cache_leftpad 0..capacity, block_table 0..num_cache_rows - 1
// (num_cache_rows: the cache's batch rows, or its pages). `checked` (int32, 3 * batch + batch * max_pages)
// receives them clamped: [cache_seqlens | cache_batch_idx | cache_leftpad | block_table, max_pages a row];
// `error` is the device's record of bad values (common/index_errors.h).
struct CacheIndexCheck {
  const int* seqlens;
  const int* batch_idx;
  const int* leftpad;
  const int* block_table;
  int64_t block_table_batch_stride;
  int max_pages;
  int num_cache_rows;
  int capacity;
  int* checked;
  int* error;
  // The Hopper split-KV's one-launch decode (no keys appended): no check kernel; the attention kernel reads
  // the caller's values (the FwdParams fields point at them) and clamps and records each where it reads it
  // (hopper/fwd_kernel.h, FwdKernel::sequence; hopper/fwd_mainloop.h, key_box), with the ranges above.
  bool at_read;
};

// Forward attention over (batch, seqlen, nheads, head_dim) tensors whose last dimension is
// contiguous and whose rows are 16-byte vectors (vector_addressable). Strides are in elements. `head_dim` equals the kernel's head dim: the binding pads
// smaller head dims up to the kernel size before launching.
struct FwdParams {
  const void* __restrict__ q;
  const void* __restrict__ k;
  const void* __restrict__ v;
  void* __restrict__ o;
  float* __restrict__ lse;  // natural log; +inf for rows that see no key (their output is 0)

  // Variable length (packed tokens): when set, sequence b holds rows [cu[b], cu[b+1]) of q/o (of k/v),
  // batch strides are unused, seqlen_q / seqlen_k are the maxima, and the LSE is (nheads, total_q).
  const int* __restrict__ cu_seqlens_q;
  const int* __restrict__ cu_seqlens_k;
  // With cu_seqlens: the packed tensors' row counts (q/o, k/v), the bounds of the Hopper kernel's TMA
  // views; 0 otherwise.
  int total_q;
  int total_k;
  // Per-batch number of valid keys (a KV cache's cache_seqlens); overrides seqlen_k when set.
  const int* __restrict__ seqused_k;

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t lse_batch_stride, lse_head_stride;  // rows are contiguous

  int batch;
  int seqlen_q;
  int seqlen_k;
  int nheads;
  int nheads_k;  // nheads % nheads_k == 0 (GQA/MQA)
  int head_dim;

  float softmax_scale;       // applied to Q·K^T
  float softmax_scale_log2;  // softmax_scale * log2(e), for exp2-based softmax

  // Features, read only by kernels compiled with them (kFeatures, below).
  // Local attention: query row i sees keys j with i + seqlen_k - seqlen_q - window_left <= j <=
  // i + seqlen_k - seqlen_q + window_right. The binding turns an unbounded side (-1) into
  // seqlen_q + seqlen_k, which bounds nothing, and a causal call's right side into 0.
  int window_left;
  int window_right;
  // Softcap: scores become softcap * tanh(Q·K^T * softmax_scale / softcap); 0 = off.
  float softcap;

  // Split-KV (run_splitkv): each of num_splits CTAs per query block covers a slice of the keys and
  // writes an fp32 partial output normalised by its own sum, with its LSE (-inf when empty), into
  // o_accum (num_splits, batch, nheads, seqlen_q, head_dim) and lse_accum (num_splits, batch,
  // nheads, seqlen_q); a combine kernel merges them into o and lse.
  int num_splits;
  float* __restrict__ o_accum;
  float* __restrict__ lse_accum;
  // The Hopper split-KV's fused combine (set: no combine kernel): one arrival counter per query block of
  // a (batch, head), zero before the launch; the CTA whose split arrives last at a block merges its rows
  // and sets the counter back to zero, so the memory is zero for the next launch (and graph replay).
  unsigned* split_counters;
  // Which tail merges them (hopper/fwd_epilogue.h, combine_if_last): both give the same bits; the binding picks
  // (FLASHBUILD_SPLITKV_PATH, docs/serving.md: kCluster unless asked). Zero, as a zeroed FwdParams has it, is kSerial.
  SplitMerge split_merge;
  // Launch the Hopper split-KV as a programmatic dependent launch (hopper/splitkv_launch.h): its CTAs may start
  // while the stream's previous kernel drains, and wait for it before their first global access
  // (hopper/splitkv_dependent_launch.h). The binding picks (FLASHBUILD_SPLITKV_PATH, docs/serving.md); kNone, as a
  // zeroed FwdParams has it, is an ordinary launch.
  DependentLaunch dependent_launch;
  // The binding allows the Hopper split-KV to run a head-dim-64 decoding call two K/V heads a CTA
  // (hopper/splitkv_decode_launch.h, launch_decode_pairs: the launch decides whether the call qualifies). False,
  // as a zeroed FwdParams has it: one K/V head a CTA.
  bool pair_heads;

  // KV cache (run_splitkv only; null or 0 in every other call). Batch row b of q reads the keys of
  // cache row cache_batch_idx[b] (b when null), skipping its first cache_leftpad[b] rows (0 when
  // null), so it sees seqused_k[b] + seqlen_knew - cache_leftpad[b] keys. With a block_table the
  // cache is paged instead: k/v are (num_pages, page_size, nheads_k, head_dim), the batch strides
  // step from page to page, and cache position p of row b lives in page
  // block_table[b * block_table_batch_stride + p / page_size], row p % page_size. page_size is a
  // multiple of the split-KV key block (common/splitkv_heuristic.h), so no key tile straddles two
  // pages; the binding refuses cache_batch_idx and cache_leftpad with a block table.
  const int* __restrict__ cache_batch_idx;
  const int* __restrict__ cache_leftpad;
  const int* __restrict__ block_table;
  int64_t block_table_batch_stride;
  int page_size;
  // The caller's index tensors before their check (common/cache_index_check.h, the first kernel of
  // run_splitkv): the fields above then point into index_check.checked, which that kernel fills with
  // the values clamped into their ranges, so no kernel after it addresses memory with a bad one.
  CacheIndexCheck index_check;

  // Appending (knew non-null; seqused_k is then set): knew/vnew (batch, seqlen_knew, nheads_k,
  // head_dim) are written into the cache at positions seqused_k[b] .. seqused_k[b] + seqlen_knew - 1
  // (cache positions, leftpad rows included) before the attention reads it. seqused_k is not changed:
  // the caller advances its own lengths, as with flash-attn.
  const void* __restrict__ knew;
  const void* __restrict__ vnew;
  int64_t knew_batch_stride, knew_row_stride, knew_head_stride;
  int64_t vnew_batch_stride, vnew_row_stride, vnew_head_stride;
  int seqlen_knew;

  // Rotary embedding (rotary_dim > 0, only with knew): rotary_cos/rotary_sin are contiguous
  // (seqlen_ro, rotary_dim / 2) in the element type. Column pairs (2i, 2i + 1) rotate by angle i
  // when rotary_interleaved (GPT-J), pairs (i, i + rotary_dim / 2) otherwise (GPT-NeoX); columns
  // from rotary_dim on pass through. New key i of row b is rotated at position seqused_k[b] + i; query
  // row i at seqused_k[b] + i when rotary_q_per_row (causal or local calls), else at seqused_k[b].
  // q is not rotated in place: q_unrotated (contiguous (batch, rotary_q_seqlen, rotary_q_nheads,
  // head_dim)) is written rotated to q_rotated (the same shape), and `q` above views q_rotated (GQA
  // packing included).
  const void* __restrict__ rotary_cos;
  const void* __restrict__ rotary_sin;
  int rotary_dim;
  bool rotary_interleaved;
  bool rotary_q_per_row;
  const void* __restrict__ q_unrotated;
  void* __restrict__ q_rotated;
  int rotary_q_seqlen;
  int rotary_q_nheads;

  // A KV cache read through the Hopper kernels' TMA views (mha_fwd_kvcache: its prefill chunks on the
  // forward, its decoding on the Hopper split-KV): the cache's first extent, pages (block_table set:
  // the views are (page_size, head_dim, nheads_k, num_pages)) or batch rows (cache_batch_idx picks
  // among them: (capacity, head_dim, nheads_k, num_pages)); 0 in every other call. The Ampere path
  // does not read it.
  int num_pages;
};

// Rows of slack per sequence in BwdParams::dq_accum: at least the backward's largest query block.
constexpr int kDqAccumRowPad = 128;

// The deterministic backward's counters (BwdParams::dq_semaphore) are laid out per 32 query rows, the
// smallest query block any backward tile uses (ampere/bwd_traits.h asserts kBlockM is a multiple of
// it), so the binding can size them before it knows which kernel serves the call.
constexpr int kDqSemaphoreRows = 32;
__host__ __device__ constexpr int dq_semaphore_blocks(int seqlen_q) {
  return (seqlen_q + kDqSemaphoreRows - 1) / kDqSemaphoreRows;
}

// Backward attention, three kernels in run_bwd: dsum = rowsum(dO * O) (the softmax-gradient
// correction), the main kernel (dK, dV, and dQ accumulated in fp32), then dQ = scale * dq_accum in
// the input dtype. dK and dV are written per *query* head (shape (batch, seqlen_k, nheads,
// head_dim)); with GQA the binding sums each group of heads.
struct BwdParams {
  const void* __restrict__ q;
  const void* __restrict__ k;
  const void* __restrict__ v;
  const void* __restrict__ dout;
  const void* __restrict__ o;      // the forward's output: o_head_dim columns (dout may be padded)
  const float* __restrict__ lse;   // from the forward pass, laid out by lse_*_stride
  float* __restrict__ dsum;        // written by the first kernel, laid out like lse
  // dq_accum: fp32, zeroed, accumulated atomically. Each (batch, head) slice holds its sequence's
  // query blocks one after the other, kDqAccumRowPad rows of slack after the sequence, so that the
  // last block is whole: (batch, nheads, seqlen_q rounded up to kDqAccumRowPad, head_dim), varlen
  // (nheads, total_q + kDqAccumRowPad * batch, head_dim) with sequence b at row cu_seqlens_q[b] +
  // kDqAccumRowPad * b. Inside a block the floats are in the backward kernel's own order (see
  // BwdTraits::dq_accum_index), which only its dQ conversion reads.
  float* __restrict__ dq_accum;
  void* __restrict__ dq;           // like q, in the input dtype, laid out by dq_out_*_stride
  void* __restrict__ dk;           // like k but with nheads heads
  void* __restrict__ dv;           // like v but with nheads heads
  const int* __restrict__ cu_seqlens_q;  // variable length, as in FwdParams
  const int* __restrict__ cu_seqlens_k;

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t do_batch_stride, do_row_stride, do_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t dq_batch_stride, dq_head_stride;                 // of dq_accum (see above)
  int64_t dq_out_batch_stride, dq_out_row_stride, dq_out_head_stride;  // of dq
  int64_t dk_batch_stride, dk_row_stride, dk_head_stride;  // of dk and dv alike
  int64_t lse_batch_stride, lse_head_stride;                // of lse and dsum alike

  int batch;
  int seqlen_q;
  int seqlen_k;
  int nheads;
  int nheads_k;
  int head_dim;
  int o_head_dim;

  float softmax_scale;
  float softmax_scale_log2;

  int window_left;  // as in FwdParams
  int window_right;
  float softcap;

  // Deterministic mode (null: off, dQ is added in whatever order the CTAs get there). When set, the
  // key-block CTAs that add into one query block's dq_accum do so one after the other in a fixed
  // order, so dQ is bit-identical from run to run (common/bwd_dq_order.h). The Ampere path compiles it
  // into its feature kernels alone (kFeatures != 0), the Hopper backward into its plain kernel; the
  // binding sends each deterministic call to the kernel that holds the mode (build_table's
  // kDeterministicPlain), and an Ampere-path plain kernel given one refuses it. int32, zeroed before
  // every call: (batch, nheads, dq_semaphore_blocks(seqlen_q)), one counter per query block of the
  // kernel's tile (block m of (b, h) at (b * nheads + h) * dq_semaphore_blocks(seqlen_q) + m; the
  // counters past the tile's block count stay unused). Varlen: seqlen_q is the longest sequence's, so
  // every sequence gets as many counters as the longest needs. Last in the struct, so that the fields
  // before it keep their offsets; the Hopper kernel's parameters put 64-byte aligned TMA descriptors
  // after a BwdParams, at byte 384 with or without it (BwdParams went from 352 to 360 bytes, and to 368
  // with total_q / total_k below).
  int* __restrict__ dq_semaphore;

  // Packed calls (cu_seqlens): the rows of q and of k/v (as FwdParams::total_q / total_k; the Hopper
  // backward's TMA views are bounded by them). After dq_semaphore, so the fields before keep their offsets.
  int total_q;
  int total_k;
};

// Features a kernel is compiled with (kFeatures, a bit set): enum Feature, from common/variant_space.h.

// One explicit instantiation per variant lives in a generated translation unit.
// kArch is the compute capability times ten (80, 86, 89, 90).
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd(const FwdParams& params, cudaStream_t stream);

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd(const BwdParams& params, cudaStream_t stream);

// Split-KV forward for decoding (short seqlen_q, long K/V cache). params.num_splits comes from
// choose_num_splits (common/splitkv_heuristic.h); with more than one split, o_accum and lse_accum
// hold that many partial results. With knew set it first appends the new keys and values to the
// cache (and rotates them and q when rotary_dim > 0), on the same stream.
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_splitkv(const FwdParams& params, cudaStream_t stream);

}  // namespace flashbuild
