// run_bwd for sm90 TUs: runtime flags -> template arguments for the Hopper backward.
// The Hopper backward (hopper/bwd_kernel.h) takes every call of head dims 64 to 256 the binding makes, to a
// plain TU or to a feature TU (kFeatures: a local window, softcap; the binding sends a call with one in
// effect to the feature TU, which compiles the kernel with them). Packed (varlen) calls too: the TMA views
// are the whole packed tensors, bounded by total_q / total_k, and each sequence is an offset in them
// (SeqRange, as for the forward). Deterministic calls
// (BwdParams::dq_semaphore set) too, on the kernel's ordered instantiation: its CTAs add each query
// block's dQ in turn (bwd_epilogue.h), in the plain TU and in the feature TU alike
// (build_table::kDeterministicPlain lists the variants whose plain kernel this is).
// What the kernel cannot take is an error, not another kernel: tensors whose pointers or strides are not
// multiples of 16 bytes (TMA's rule, and its 16-byte vector paths'; the binding copies such tensors into
// aligned ones) and calls with no queries or no keys (the binding answers those itself: zero gradients).
// So only a direct C++ caller meets it, and no sm90 TU compiles the Ampere-path backward beside this one
// (head dim 32, with no Hopper tile, includes ampere/bwd_launch.h alone).
// Three kernels per call, as on the Ampere path: dsum = rowsum(dO * O) (the Ampere path's
// launch_dot_do_o: its layout, like the LSE's, is family-neutral), the main kernel, and this
// family's dQ conversion (dq_accum's order inside a block is the family's own).
// The main kernel (and its deterministic instantiation) is reached through BwdKernelEntry (bwd_params.h):
// a variant's TU specializes it to the fatbins of its kernel TUs (<variant>_kernel.cu,
// <variant>_kernel_ordered.cu), which compile those kernels device-only, beside it. The small kernels (dsum,
// the dQ conversion) are the same for every variant of a head dim and dtype: one TU of those compiles them
// (BwdSmallKernels, below; hopper/bwd_small_kernels.h), and this header includes none of the kernels' code.
#pragma once

#include "common/launch.h"  // check_head_dim, FLASHBUILD_CUDA_CHECK
#include "hopper/bwd_params.h"  // the descriptors and parameters; not the main kernel (bwd_kernel.h)
#include "hopper/tma_checks.h"

namespace flashbuild {
namespace hopper {

// dsum before the main kernel and the dQ conversion after it. Declared here, defined in hopper/bwd_small_kernels.h:
// one TU of the build's variants with these traits instantiates them (that header says why), and the others'
// launches link to it. A tuning harness that launches other traits includes hopper/bwd_small_kernels.h itself.
template <class Traits>
struct BwdSmallKernels {
  static void dsum(const BwdParams& params, cudaStream_t stream);
  static void convert_dq(const BwdParams& params, cudaStream_t stream);
};

constexpr bool bwd_serves_head_dim(int head_dim) { return head_dim >= 64; }  // 64, 96, 128, 192, 256

// Whether the Hopper backward can take this call (see the top of this file). Its 16-byte
// vector paths (dq_accum, the gradients) need the alignment TMA needs, so tma_addressable covers them.
inline bool can_run(BwdParams const& p, int head_dim, int64_t elem_bytes) {
  if (p.head_dim != head_dim || p.seqlen_q <= 0 || p.seqlen_k <= 0 || p.nheads_k <= 0 || p.nheads % p.nheads_k != 0) {
    return false;
  }
  // Packed calls: both sides packed, with their totals; dQ in the fragment order (the default; the
  // row-major order's conversion is dense only).
  if (!p.cu_seqlens_q != !p.cu_seqlens_k || (p.cu_seqlens_q && (p.total_q <= 0 || p.total_k <= 0))) { return false; }
  if (p.cu_seqlens_q && bwd_tile(head_dim).dq_order == DqOrder::kRowMajor) { return false; }
  const ViewExtents e = view_extents(p);
  return tma_addressable(p.q, elem_bytes, {{p.q_row_stride, e.rows_q}, {p.q_head_stride, p.nheads}, {p.q_batch_stride, e.batches_q}}) &&
         tma_addressable(p.dout, elem_bytes, {{p.do_row_stride, e.rows_q}, {p.do_head_stride, p.nheads}, {p.do_batch_stride, e.batches_q}}) &&
         tma_addressable(p.k, elem_bytes, {{p.k_row_stride, e.rows_k}, {p.k_head_stride, p.nheads_k}, {p.k_batch_stride, e.batches_k}}) &&
         tma_addressable(p.v, elem_bytes, {{p.v_row_stride, e.rows_k}, {p.v_head_stride, p.nheads_k}, {p.v_batch_stride, e.batches_k}}) &&
         tma_addressable(p.dk, elem_bytes, {{p.dk_row_stride, e.rows_k}, {p.dk_head_stride, p.nheads}, {p.dk_batch_stride, e.batches_k}}) &&
         tma_addressable(p.dv, elem_bytes, {{p.dk_row_stride, e.rows_k}, {p.dk_head_stride, p.nheads}, {p.dk_batch_stride, e.batches_k}}) &&
         tma_addressable(p.dq, elem_bytes, {{p.dq_out_row_stride, e.rows_q}, {p.dq_out_head_stride, p.nheads}, {p.dq_out_batch_stride, e.batches_q}}) &&
         tma_addressable(p.dq_accum, 4, {{p.dq_head_stride, p.nheads}, {p.dq_batch_stride, e.batches_q}});
}

// Strides over an extent of 1 made valid for TMA (tma_checks.h).
inline BwdParams bwd_tma_strides(BwdParams p) {
  const ViewExtents e = view_extents(p);
  auto fix = [&](int64_t& stride, int extent) { stride = unit_extent_stride(stride, extent, p.head_dim); };
  fix(p.q_head_stride, p.nheads), fix(p.do_head_stride, p.nheads);
  fix(p.k_head_stride, p.nheads_k), fix(p.v_head_stride, p.nheads_k);
  fix(p.q_batch_stride, e.batches_q), fix(p.do_batch_stride, e.batches_q);
  fix(p.k_batch_stride, e.batches_k), fix(p.v_batch_stride, e.batches_k);
  fix(p.q_row_stride, e.rows_q), fix(p.do_row_stride, e.rows_q);
  fix(p.k_row_stride, e.rows_k), fix(p.v_row_stride, e.rows_k);
  return p;
}

// The three kernels of one Hopper backward call with these traits (tuning sweeps call it directly, with
// bwd_kernel.h and bwd_small_kernels.h included: BwdKernelEntry, BwdSmallKernels).
template <class Traits, bool kIsCausal, int kFeatures>
void launch_bwd(const BwdParams& params, cudaStream_t stream) {
  check_grid_yz("the Hopper backward", params.nheads, params.batch);
  BwdSmallKernels<Traits>::dsum(params, stream);

  BwdKernelParams<Traits> kp{params, BwdLoads<Traits>::to_params(bwd_tma_strides(params))};
  const int n_blocks = (params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  constexpr int kSection = bwd_lpt_section<Traits, kIsCausal, false>();
  const bool windowed = (kFeatures & kLocal) != 0 && params.window_left < params.seqlen_q + params.seqlen_k;
  if (kSection > 0 && !params.dq_semaphore && !windowed) {
    kp.section_shift = bwd_section_shift(kSection, params.nheads);
  }
  const BwdSectionGrid g = bwd_section_grid(n_blocks, params.nheads, params.batch, kp.section_shift);
  const dim3 grid(g.x, g.y, g.z);
#if FLASHBUILD_SPLITKV_TIMELINE
  kp.timeline = timeline_launch_buffer(int(grid.x * grid.y * grid.z));  // a study build's (bwd_kernel.h, BwdTimeline)
#endif
  // Deterministic mode is an instantiation of its own (bwd_kernel.h says why).
  const KernelHandle& kernel = params.dq_semaphore ? BwdKernelEntry<Traits, kIsCausal, kFeatures, true>::get()
                                                   : BwdKernelEntry<Traits, kIsCausal, kFeatures, false>::get();
  kernel.launch(grid, Traits::kNThreads, Traits::kSmemBytes, stream, kp);

  BwdSmallKernels<Traits>::convert_dq(params, stream);
  FLASHBUILD_CUDA_CHECK(cudaGetLastError());
}

template <int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd_sm90(const BwdParams& params, cudaStream_t stream) {
  launch_bwd<BwdVariantTraits<kHeadDim, kDType, kIsCausal>, kIsCausal, kFeatures>(params, stream);
}

}  // namespace hopper

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd(const BwdParams& params, cudaStream_t stream) {
  static_assert(kArch >= 90 && hopper::bwd_serves_head_dim(kHeadDim),
                "an sm90 backward TU with a Hopper kernel (the others include ampere/bwd_launch.h)");
  check_head_dim("run_bwd", kHeadDim, params.head_dim);
  if (params.batch == 0 || params.nheads == 0) { return; }
  using Element = typename hopper::ElementOf<kDType>::type;
  if (!hopper::can_run(params, kHeadDim, sizeof(Element))) {
    throw std::runtime_error("flashbuild: the Hopper backward cannot take this call: it needs queries and keys "
                             "(seqlen_q, seqlen_k > 0) and q, k, v, dout, dq, dk, dv, dq_accum whose pointers and strides "
                             "are multiples of 16 bytes; the Python API copies misaligned tensors and answers calls "
                             "without queries or keys itself, so call run_bwd the way it does "
                             "(kernels/binding/flash_api.cpp)");
  }
  hopper::run_bwd_sm90<kHeadDim, kDType, kIsCausal, kFeatures>(params, stream);
}

}  // namespace flashbuild
