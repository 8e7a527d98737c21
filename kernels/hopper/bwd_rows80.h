// The rows-80 form of the Hopper backward (a study form, off by default): the hdim-128 plain non-causal
// kernel with 80 query rows a step instead of 64, FlashAttention-3's non-causal hdim-128 tile, its dQ
// computed transposed (dQ^T = K^T dS^T: the head dim as wgmma M, bwd_traits.h kDqSwapAB), since 80 rows
// are no whole wgmma M. The SASS study behind it: benchmarks/bwd_sass_fa3/README.md ("Ranked changes",
// item 1): 1.25x the work a step for about the same instructions; this form's own SASS and the A/B for a
// GPU call: benchmarks/hopper_bwd_rows80/README.md.
//   nvcc -DFLASHBUILD_HOPPER_BWD_ROWS80=1 builds it in place of the 64-row kernel of hdim 128 non-causal
// kernels without features (fp16 and bf16, the default and the deterministic instantiation). Causal,
// local-window and softcap kernels and every other head dim keep their tiles; with the define unset
// every kernel is the tree's own (BwdRunTraits is the variant's traits).
// What follows kBlockM: the query-block count of a key block (the mask's m_block_min / max), the stages'
// LSE / dsum rows, deterministic mode's turns (common/bwd_dq_order.h, per query block of the kernel's
// tile; its counters are per 32 rows, so 80-row blocks need fewer than the binding makes), varlen's
// offsets, and dq_accum: a block's floats in fragment order with its 8-query-row groups first (bwd_traits.h,
// kDqSwapAB: every value of column group g of dQ^T is a query row in [8g, 8g + 8)), so that the dQ writer
// adds only the groups that hold rows of the sequence (bwd_epilogue.h), and the block never reaches past
// the rows dq_accum holds (the binding rounds a sequence up to 128 rows, params.h kDqAccumRowPad, which 80-row
// blocks do not divide). So a warpgroup's half of a block (a head-dim half of dQ^T) is spread over every group:
// with =1 both warpgroups hand dQ on together (one bulk reduction a block); with =2 each alone (kDqHalves), its
// half added by one 2 KB reduction per group (bwd_epilogue.h).
#pragma once

#include <type_traits>

#include "hopper/bwd_traits.h"

namespace flashbuild::hopper {

#if defined(FLASHBUILD_HOPPER_BWD_ROWS80) && FLASHBUILD_HOPPER_BWD_ROWS80
constexpr bool kBwdRows80 = true;
// =2: each warpgroup hands its half of dQ^T on alone (kDqHalves, the 64-row default's hand-off), the writer adding
// it by one bulk reduction per 8-row group (2 KB each); =1: one hand-off for both, one reduction a block.
constexpr bool kBwdRows80Halves = FLASHBUILD_HOPPER_BWD_ROWS80 == 2;
#else
constexpr bool kBwdRows80 = false;
constexpr bool kBwdRows80Halves = false;
#endif
constexpr int kBwdRows80BlockM = 80;

// The traits a variant's kernel runs with (its launch, kernel entry and dQ conversion): the variant's traits,
// or with the define the rows-80 form of them.
template <class Traits, bool kIsCausal, int kFeatures>
struct BwdRunTraits {
  static constexpr bool kRows80 = kBwdRows80 && Traits::kHeadDim == 128 && !kIsCausal && kFeatures == 0 &&
                                  Traits::kBlockM == 64 && !Traits::kSplitHeadDim && Traits::kDqBulk;
  using type = conditional_t<kRows80,
                             BwdTraits<Traits::kHeadDim, kBwdRows80BlockM, Traits::kBlockN, typename Traits::Element,
                                       Traits::kDqOrder, Traits::kDeferDq, Traits::kDqFirst, Traits::kDsFirst,
                                       Traits::kTmaFirst, kBwdRows80Halves, Traits::kStages>,
                             Traits>;
};

}  // namespace flashbuild::hopper
