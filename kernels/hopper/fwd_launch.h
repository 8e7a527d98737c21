// run_fwd for sm90 TUs: runtime flags -> template arguments, and which family serves a call.
// The Hopper kernel (hopper/fwd_kernel.h) takes dense calls of head dims 32, 64, 96, 128, 192, 256
// whose tensors TMA can address, dense or packed (cu_seqlens: the TMA views are the whole packed
// tensors, bounded by total_q / total_k, and each sequence is an offset in them: SeqRange in
// tile_scheduler.h). A TMA box of keys may run past its sequence's last key: into rows the mask
// cuts (seqused_k), or into the next packed sequence's first rows; the consumers zero those V rows
// before P V reads them (mainloop.h, zero_v_rows), so whatever they hold (NaN, inf) stays out of
// the result, as on the Ampere path, which reads zeros there. Everything else runs on the
// Ampere-path kernel compiled for sm_90a, exactly as ampere/fwd_launch.h launches it, so results
// are always right:
//   - other head dims (none today: every kernel head dim has a tile, fwd_tile in traits.h);
//   - tensors whose pointers or strides are not multiples of 16 bytes (TMA's rule), empty K.
// A paged KV cache (block_table: the binding's prefill-sized cache calls at head dims 32-128) runs
// here alone: each key box is one page's rows (FwdMainloop::key_box), the page size a multiple of
// the key block.
// That Ampere-path forward, run_fwd_ampere_path, is only declared here and defined in
// hopper/fwd_fallback.h: this header does not include ampere/fwd_kernel.h, and an edit to either
// family's kernel recompiles only its own TUs. Nor does it include the Hopper kernel
// (hopper/fwd_kernel.h): a variant's TU is the launch alone, host code (the dispatch, the TMA
// descriptors of fwd_params.h), and reaches the kernel through FwdKernelEntry. Each variant with a
// Hopper kernel has two more TUs: <variant>_kernel.cu, the kernel compiled device-only, and
// <variant>_fallback.cu, which instantiates run_fwd_ampere_path; a variant with none (no such head
// dim today) would not be compiled from this header: its one TU would include ampere/fwd_launch.h alone.
#pragma once

#include "ampere/utils.h"  // check_head_dim, sm_count, FLASHBUILD_CUDA_CHECK: family-neutral launch helpers
#include "hopper/fwd_params.h"  // the descriptors and parameters; not the kernel (fwd_kernel.h)
#include "hopper/tma_checks.h"

namespace flashbuild {
namespace hopper {

constexpr bool serves_head_dim(int head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 192 || head_dim == 256;
}

// Whether the Hopper kernel can take this call (see the top of this file).
inline bool can_run(FwdParams const& p, int head_dim, int64_t elem_bytes) {
  if (p.head_dim != head_dim || p.seqlen_k <= 0 || p.nheads_k <= 0 || p.nheads % p.nheads_k != 0) { return false; }
  // Packed tensors: both or neither (the binding passes both), with their row counts.
  if (!p.cu_seqlens_q != !p.cu_seqlens_k || (p.cu_seqlens_q && (p.total_q <= 0 || p.total_k <= 0))) { return false; }
  const ViewExtents e = view_extents(p);
  return tma_addressable(p.q, elem_bytes, {{p.q_row_stride, e.rows_q}, {p.q_head_stride, p.nheads}, {p.q_batch_stride, e.batches_q}}) &&
         tma_addressable(p.k, elem_bytes, {{p.k_row_stride, e.rows_k}, {p.k_head_stride, p.nheads_k}, {p.k_batch_stride, e.batches_k}}) &&
         tma_addressable(p.v, elem_bytes, {{p.v_row_stride, e.rows_k}, {p.v_head_stride, p.nheads_k}, {p.v_batch_stride, e.batches_k}}) &&
         tma_addressable(p.o, elem_bytes, {{p.o_row_stride, e.rows_q}, {p.o_head_stride, p.nheads}, {p.o_batch_stride, e.batches_q}});
}

// Strides over an extent of 1 made valid for TMA (tma_checks.h).
inline FwdParams tma_strides(FwdParams p) {
  const ViewExtents e = view_extents(p);
  // head_dim elements: a multiple of 16 bytes (head_dim % 16 == 0)
  auto fix = [&](int64_t& stride, int extent) { stride = unit_extent_stride(stride, extent, p.head_dim); };
  fix(p.q_head_stride, p.nheads), fix(p.o_head_stride, p.nheads);
  fix(p.k_head_stride, p.nheads_k), fix(p.v_head_stride, p.nheads_k);
  fix(p.q_batch_stride, e.batches_q), fix(p.o_batch_stride, e.batches_q);
  fix(p.k_batch_stride, e.batches_k), fix(p.v_batch_stride, e.batches_k);
  fix(p.q_row_stride, e.rows_q), fix(p.o_row_stride, e.rows_q);
  fix(p.k_row_stride, e.rows_k), fix(p.v_row_stride, e.rows_k);
  return p;
}

// One launch of the Hopper forward kernel with these traits (tuning sweeps call it directly, with
// fwd_kernel.h included: FwdKernelEntry, fwd_params.h).
template <class Traits, bool kIsCausal, int kFeatures>
void launch_fwd(const FwdParams& params, cudaStream_t stream) {
  using KernelParams = FwdKernelParams<Traits, kIsCausal, kFeatures>;
  const FwdParams tma_params = tma_strides(params);
  KernelParams kp{params, FwdLoads<Traits>::to_params(tma_params), FwdStores<Traits>::to_params(tma_params),
                  KernelParams::Scheduler::make({params.seqlen_q, Traits::kBlockM, params.nheads, params.batch})};
  const dim3 grid(kp.scheduler.grid_size(ampere::sm_count()));
  FwdKernelEntry<Traits, kIsCausal, kFeatures>::get().launch(grid, Traits::kNThreads, Traits::kSmemBytes, stream, kp);
}

template <int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd_sm90(const FwdParams& params, cudaStream_t stream) {
  launch_fwd<VariantTraits<kHeadDim, kDType, kIsCausal>, kIsCausal, kFeatures>(params, stream);
}

}  // namespace hopper

// The Ampere-path forward, as ampere/fwd_launch.h launches it: defined in hopper/fwd_fallback.h and
// instantiated in the variant's fallback TU.
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd_ampere_path(const FwdParams& params, cudaStream_t stream);

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd(const FwdParams& params, cudaStream_t stream) {
  ampere::check_head_dim("run_fwd", kHeadDim, params.head_dim);
  if (params.seqlen_q == 0 || params.batch == 0 || params.nheads == 0) { return; }
  if constexpr (kArch >= 90 && hopper::serves_head_dim(kHeadDim)) {
    using Element = typename hopper::ElementOf<kDType>::type;
    // A paged cache (the binding's prefill chunks, head dims 32-128): a key box must not straddle two
    // pages; the Ampere path, which does not page, refuses what this kernel cannot take.
    const bool pages_fit = !params.block_table || params.page_size % hopper::fwd_tile(kHeadDim, kIsCausal).block_n == 0;
    if (pages_fit && hopper::can_run(params, kHeadDim, sizeof(Element))) {
      hopper::run_fwd_sm90<kHeadDim, kDType, kIsCausal, kFeatures>(params, stream);
      return;
    }
  }
  run_fwd_ampere_path<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(params, stream);
}

}  // namespace flashbuild
