// What the host side of a Hopper backward launch needs, and none of the main kernel's code: the TMA
// views and descriptors of Q, dO, K and V, which the host builds and the kernel reads from its
// parameters; those parameters; the traits a variant is built with; and the entry through which a
// launch reaches the main kernel (the forward's counterpart: fwd_params.h).
//
// A variant's launch TU (bwd_launch.h) includes this header and bwd_dq_accum.h (its dQ conversion kernels
// read dq_accum in the order the main kernel adds into it), not bwd_mainloop.h, bwd_epilogue.h or
// bwd_kernel.h; the main kernel and its deterministic instantiation compile device-only in TUs of their own
// (<variant>_kernel.cu, <variant>_kernel_ordered.cu). So an edit to the main loop or its epilogue recompiles
// only those.
#pragma once

#include "common/kernel_library.h"
#include "common/params.h"
#include "common/timeline.h"  // a study build's CTA records (FLASHBUILD_SPLITKV_TIMELINE); nothing without it
#include "hopper/bwd_sections.h"  // the grid's sections: extents, a CTA's key block and head
#include "hopper/bwd_traits.h"
#include "hopper/tile_scheduler.h"  // view_extents
#include "hopper/utils.h"

namespace flashbuild::hopper {

// The TMA descriptors of Q, dO, K and V, built from their global views (gmem_view, utils.h).
template <class Traits>
struct BwdLoads {
  using Element = typename Traits::Element;
  static constexpr int kHeadDim = Traits::kHeadDim;
  using TileMD = Shape<Int<Traits::kBlockM>, Int<kHeadDim>>;
  using TileND = Shape<Int<Traits::kBlockN>, Int<kHeadDim>>;
  using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShape{}, GmemStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(typename Traits::SmemLayoutQ{}), TileMD{}, _1{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, typename Traits::SmemLayoutK{}, TileND{}, _1{}));

  struct Params {
    TmaQ tma_q;
    TmaQ tma_do;
    TmaKV tma_k;
    TmaKV tma_v;
  };

  // Packed calls: the views are the whole packed tensors, one batch (tile_scheduler.h, SeqRange).
  static Params to_params(BwdParams const& p) {
    const ViewExtents e = view_extents(p);
    auto view = [](void const* ptr, int rows, int heads, int batches, int64_t row, int64_t head, int64_t batch) {
      return gmem_view<kHeadDim>(static_cast<Element const*>(ptr), rows, heads, batches, row, head, batch);
    };
    auto mQ = view(p.q, e.rows_q, p.nheads, e.batches_q, p.q_row_stride, p.q_head_stride, p.q_batch_stride);
    auto mdO = view(p.dout, e.rows_q, p.nheads, e.batches_q, p.do_row_stride, p.do_head_stride, p.do_batch_stride);
    auto mK = view(p.k, e.rows_k, p.nheads_k, e.batches_k, p.k_row_stride, p.k_head_stride, p.k_batch_stride);
    auto mV = view(p.v, e.rows_k, p.nheads_k, e.batches_k, p.v_row_stride, p.v_head_stride, p.v_batch_stride);
    auto sQ = take<0, 2>(typename Traits::SmemLayoutQ{});
    return {make_tma_copy(SM90_TMA_LOAD{}, mQ, sQ, TileMD{}, _1{}), make_tma_copy(SM90_TMA_LOAD{}, mdO, sQ, TileMD{}, _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, mK, typename Traits::SmemLayoutK{}, TileND{}, _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, mV, typename Traits::SmemLayoutV{}, TileND{}, _1{})};
  }

  CUTE_DEVICE static void prefetch_descriptors(Params const& mp) {
    cute::prefetch_tma_descriptor(mp.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_v.get_tma_descriptor());
  }
};

// The main kernel's one parameter (__grid_constant__: the copy engine reads the descriptors in place).
template <class Traits>
struct BwdKernelParams {
  BwdParams bwd;
  typename BwdLoads<Traits>::Params mainloop;
  int section_shift = 0;  // log2 of the heads a causal section interleaves in blockIdx.x (bwd_lpt_section)
#if FLASHBUILD_SPLITKV_TIMELINE
  uint64_t* timeline = nullptr;  // a study build's CTA records (bwd_kernel.h, BwdTimeline); the default has no such field
#endif
};

// A causal grid (not the deterministic mode's ordered kernel, nor a call with a local window in effect, whose CTAs cost
// about the same: the launch then keeps the grid's own order) is walked longest first across sections of a few heads of
// one batch, FA3's causal backward order with small sections: inside a section key block 0 of every head comes first,
// then key block 1, and so on, so the grid no longer ends with the last heads' long CTAs. The launch lays the grid out
// in that order, (key blocks x 2^s, nheads / 2^s, batch), 2^s the largest power of two up to the section that divides
// nheads (BwdKernelParams::section_shift), and the kernel reads its key block and head from blockIdx with a shift and a
// mask (bwd_sections.h; the hardware starts CTAs in the order of their linear index, x fastest). In turns on the H200
// against the grid's own order (benchmarks/hopper_bwd_lpt/, fp16, 1k / 4k / 16k): hdim 64 causal 0.999 / 1.022 / 1.001x
// (sections of 4), hdim 128 1.008 / 1.053 / 1.003x (4), hdim 256 1.034 / 1.040 / 1.005x (8) (h200-5); hdim 96 1.000 /
// 1.022 / 0.997x (4), hdim 192 1.005 / 1.011 / 0.999x (4) (h200-7); with softcap, in the feature kernels, 1.003-1.037 /
// 1.024-1.053 / 1.000-1.006x (h200-9). A remap of the linear CTA index, which divides, cost hdim 64 a spill (0.956x at
// 16k) and was taken out (h200-2). nvcc -DFLASHBUILD_HOPPER_BWD_LPT_SECTION=<n> sets the section for every head dim of
// a build (0: the grid's own order).
template <class Traits, bool kIsCausal, bool kOrdered>
constexpr int bwd_lpt_section() {
  if (!kIsCausal || kOrdered) { return 0; }
#ifdef FLASHBUILD_HOPPER_BWD_LPT_SECTION
  static_assert(FLASHBUILD_HOPPER_BWD_LPT_SECTION >= 0, "a section is a count of heads, 0 for the grid's own order");
  return FLASHBUILD_HOPPER_BWD_LPT_SECTION;
#else
  return Traits::kHeadDim == 256 ? 8 : 4;
#endif
}

// The traits a variant's backward is built with (its head dim's tile, bwd_traits.h).
template <int kHeadDim, DType kDType, bool kIsCausal>
using BwdVariantTraits = BwdTraits<kHeadDim, bwd_tile(kHeadDim).block_m, bwd_tile(kHeadDim).block_n,
                                   typename ElementOf<kDType>::type, bwd_tile(kHeadDim).dq_order, false,
                                   bwd_tile(kHeadDim).dq_first, bwd_tile(kHeadDim).ds_first,
                                   bwd_tile(kHeadDim).tma_first, bwd_tile(kHeadDim).dq_halves, bwd_tile(kHeadDim).stages>;

// Where a launch finds the main kernel of these features (kFeatures, common/params.h; kOrdered: the
// deterministic instantiation). bwd_kernel.h defines
// `get` as the kernel's own symbol, for a TU that compiles the kernel with its launch (a tuning harness:
// include bwd_kernel.h beside bwd_launch.h). A variant's launch TU, which does not include bwd_kernel.h,
// specializes `get` to the fatbin of the kernel TU that compiles that kernel device-only
// (templates/bwd_instantiate.cu.j2); the kernel TU instantiates this struct, and through `get` the kernel
// (templates/bwd_kernel.cu.j2).
template <class Traits, bool kIsCausal, int kFeatures, bool kOrdered>
struct BwdKernelEntry {
  static const KernelHandle& get();
};

}  // namespace flashbuild::hopper
