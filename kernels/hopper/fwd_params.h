// What the host side of a Hopper forward launch needs, and nothing of the kernel's bodies: the TMA
// views and descriptors of Q, K, V (loads) and O (store), which the host builds and the kernel reads
// from its parameters; those parameters; the traits a variant is built with; and the entry through
// which a launch reaches the kernel.
//
// A variant's launch TU (fwd_launch.h) includes this header and not fwd_mainloop.h, fwd_epilogue.h,
// fwd_softmax.h or fwd_kernel.h; its kernel compiles device-only in a TU of its own
// (<variant>_kernel.cu), which includes fwd_kernel.h. So an edit to the kernel's code recompiles only
// the kernel TUs; an edit to the traits or to these types recompiles both.
#pragma once

#include "common/kernel_library.h"
#include "common/params.h"
#include "common/splitkv_heuristic.h"  // kHopperSplitKVCtasPerSm
#include "hopper/fwd_traits.h"
#include "hopper/tile_scheduler.h"
#include "hopper/utils.h"

namespace flashbuild::hopper {

// The TMA descriptors of Q, K and V (loads) and of O (store: the same view of Q's rows, SeqRange), built from
// their global views (gmem_view, utils.h).
template <class Traits>
struct FwdLoads {
  using Element = typename Traits::Element;
  using SmemLayoutQ = typename Traits::SmemLayoutQ;
  using SmemLayoutK = typename Traits::SmemLayoutK;
  using SmemLayoutV = typename Traits::SmemLayoutV;
  using TileShapeQK = typename Traits::TileShapeQK;
  using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShape{}, GmemStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutQ{}, select<0, 2>(TileShapeQK{}), _1{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutK{}),
                                       select<1, 2>(TileShapeQK{}), _1{}));

  struct Params {
    TmaQ tma_q;
    TmaKV tma_k;
    TmaKV tma_v;
  };

  static Params to_params(FwdParams const& p) {
    constexpr int kHeadDim = Traits::kHeadDim;
    const ViewExtents e = view_extents(p);
    auto mQ = gmem_view<kHeadDim>(static_cast<Element const*>(p.q), e.rows_q, p.nheads, e.batches_q, p.q_row_stride,
                                  p.q_head_stride, p.q_batch_stride);
    auto mK = gmem_view<kHeadDim>(static_cast<Element const*>(p.k), e.rows_k, p.nheads_k, e.batches_k, p.k_row_stride,
                                  p.k_head_stride, p.k_batch_stride);
    auto mV = gmem_view<kHeadDim>(static_cast<Element const*>(p.v), e.rows_k, p.nheads_k, e.batches_k, p.v_row_stride,
                                  p.v_head_stride, p.v_batch_stride);
    return {make_tma_copy(SM90_TMA_LOAD{}, mQ, SmemLayoutQ{}, select<0, 2>(TileShapeQK{}), _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, mK, take<0, 2>(SmemLayoutK{}), select<1, 2>(TileShapeQK{}), _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, mV, take<0, 2>(SmemLayoutV{}), select<1, 2>(TileShapeQK{}), _1{})};
  }

  CUTE_DEVICE static void prefetch_descriptors(Params const& mp) {
    cute::prefetch_tma_descriptor(mp.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_v.get_tma_descriptor());
  }
};

template <class Traits>
struct FwdStores {
  using Element = typename Traits::Element;
  using SmemLayoutO = typename Traits::SmemLayoutO;
  using TileShapePV = typename Traits::TileShapePV;
  using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<Element*>(nullptr)), GmemShape{}, GmemStride{}));
  using TmaO = decltype(make_tma_copy(SM90_TMA_STORE{}, GmemTensor{}, SmemLayoutO{}, select<0, 1>(TileShapePV{}), _1{}));

  struct Params {
    TmaO tma_o;
  };

  static Params to_params(FwdParams const& p) {
    const ViewExtents e = view_extents(p);
    auto mO = gmem_view<Traits::kHeadDim>(static_cast<Element*>(p.o), e.rows_q, p.nheads, e.batches_q, p.o_row_stride,
                                          p.o_head_stride, p.o_batch_stride);
    return {make_tma_copy(SM90_TMA_STORE{}, mO, SmemLayoutO{}, select<0, 1>(TileShapePV{}), _1{})};
  }

  CUTE_DEVICE static void prefetch_descriptors(Params const& ep) {
    cute::prefetch_tma_descriptor(ep.tma_o.get_tma_descriptor());
  }
};

// The forward kernel compiled for split-KV decoding (run_splitkv, hopper/splitkv_launch.h): a bit of
// kFeatures beside the user features (common/params.h), never set by a forward variant. Its kernel reads
// the keys of a KV cache (a batch row index, left padding, appended keys: FwdKernel::sequence), covers
// one of num_splits slices of them per tile (SplitTileScheduler, FwdMainloop::keys) and, with more
// than one split, writes fp32 partial results for the combine kernel (FwdEpilogue::store_split).
constexpr int kSplitKVKernel = 1 << 8;
template <int kFeatures>
inline constexpr bool kIsSplitKV = (kFeatures & kSplitKVKernel) != 0;

// The split-KV kernel's tile: kSplitKVBlockM (64) query rows (one consumer warpgroup: a decoding call fills 1-8
// of them with the query heads of one K/V head) and hopper_splitkv_block_n keys (every page size the binding
// accepts holds whole boxes). Its first form had 128 keys and as many stages as one CTA's shared memory held;
// with the forward's tiles (192 rows at hdim 64) the same work ran 1.05-1.43x the Ampere-path split-KV
// kernel's time from batch 64; with this one 0.38-0.86x everywhere measured (benchmarks/decode/README.md,
// "The tile a Hopper split-KV would take").
// Since issue 45's "Two CTAs per SM" (common/splitkv_heuristic.h, kHopperSplitKVCtasPerSm): two CTAs an SM, each
// with two stages of hopper_splitkv_block_n keys (64 above head dim 64).
constexpr int splitkv_stages(int) { return 2; }
template <int kHeadDim, DType kDType>
using SplitKVTraits = FwdTraits<kHeadDim, kSplitKVBlockM, hopper_splitkv_block_n(kHeadDim), splitkv_stages(kHeadDim), false,
                                typename ElementOf<kDType>::type, OStore::kAuto, kHopperSplitKVCtasPerSm>;

// The kernel's one parameter (__grid_constant__: the copy engine reads the descriptors in place).
// Causal query blocks, and local ones, differ in length: the scheduler deals them longest first (short dense causal
// calls: pairs of them first, tile_scheduler.h).
template <class Traits, bool kIsCausal, int kFeatures>
struct FwdKernelParams {
  using Scheduler = std::conditional_t<kIsSplitKV<kFeatures>, SplitTileScheduler,
                                       PersistentTileScheduler<kIsCausal || (kFeatures & kLocal) != 0>>;
  FwdParams fwd;
  typename FwdLoads<Traits>::Params mainloop;
  typename FwdStores<Traits>::Params epilogue;
  Scheduler scheduler;
#if FLASHBUILD_SPLITKV_TIMELINE
  uint64_t* timeline = nullptr;  // a study build's CTA records (common/timeline.h); the default has no such field
#endif
};

// A bit of kFeatures beside the user features and kSplitKVKernel: the 128-key kernel that a variant whose
// main kernel takes wide tiles (kWideKeys) keeps for the calls those cannot take (a paged cache) or are slower
// at (short keys): fwd_launch.h, run_fwd_sm90. Its own TU (<variant>_kernel_keys128.cu: selection/families.py,
// KernelTu "kernel_keys128", whose rule is kWideKeys's) and its own entry type beside the main kernel's.
constexpr int kKeys128Kernel = 1 << 9;

// Whether a kernel can run in clusters of two CTAs that share each K and V box (K/V multicast): CTAs 2c and 2c + 1
// of the non-causal persistent deal take query blocks m and m + 1 of one (batch, head) when a head's query blocks are
// even (tile_scheduler.h), so they read the same keys in the same order. The first CTA's producer issues each box
// once, multicast into both CTAs' rings; the second CTA's producer arms its own barriers and tells the first when its
// consumers have released a stage (fwd_mainloop.h, load). The same bytes reach both SMs at half the L2 reads, and the
// card, which runs these calls at its power limit, turns the saved energy into clock (FA3's cluster kernels gained
// 2.6 % at hdim 128 and 1.3 % at 256 alone that way, benchmarks/fwd_clock_power/). The launch decides per call
// (fwd_launch.h): a call whose query blocks are odd, packed (cu_seqlens) or paged runs one CTA a box on the same
// kernel (FLASHBUILD_HOPPER_FWD_KV_MULTICAST=off: every call). Measured on the H200, alone at the card's own clocks
// and in turns (benchmarks/fwd_kv_multicast/, fp16, non-causal): in the kernels whose O goes out through V's ring
// (kOAliasesV: hdim 128's 176-key tiles, 192, 256), where the first CTA's V then waits on both CTAs' stores of O each
// tile, 1.9 % faster to 4.1 % slower alone and 1.2-8.9 % slower in turns than one CTA a box (h200-1); in hdim 128's
// 128-key kernel (an O buffer of its own) 1.017-1.027x the tree before alone at 1k-4k, 1.005-1.012x in turns, the
// work a clock tick level (h200-2). So the plain non-causal kernels with an O buffer of their own alone.
// nvcc -DFLASHBUILD_HOPPER_FWD_MULTICAST_KERNELS=0 builds every kernel without it (the tree before, for A/B runs: the
// same instructions, the 128-key kernel's registers allocated otherwise).
#if defined(FLASHBUILD_HOPPER_FWD_MULTICAST_KERNELS)
inline constexpr bool kMulticastKernels = FLASHBUILD_HOPPER_FWD_MULTICAST_KERNELS != 0;
#else
inline constexpr bool kMulticastKernels = true;
#endif
template <class Traits, bool kIsCausal, int kFeatures>
inline constexpr bool kMulticastKV = kMulticastKernels && !kIsCausal && (kFeatures & kAllFeatures) == 0 &&
                                     !kIsSplitKV<kFeatures> && Traits::kHeadDim >= 128 && !Traits::kOAliasesV;

// Whether the main kernel of a variant takes wide_keys tiles (fwd_traits.h, fwd_tile): the plain (no local
// window, no softcap) non-causal variant, where no mask cuts a key block but the sequence's end, and only at a
// head dim whose wide tile differs.
template <int kHeadDim, bool kIsCausal, int kFeatures>
inline constexpr bool kWideKeys =
    !kIsCausal && (kFeatures & (kAllFeatures | kKeys128Kernel)) == 0 &&
    fwd_tile(kHeadDim, true).block_n != fwd_tile(kHeadDim).block_n;

// Whether a variant's kernel is a plain one (no local window, no softcap): fwd_tile's `plain`, the tiles
// measured on those kernels alone (hdim 192's 112-key tile, fwd_traits.h).
template <int kFeatures>
inline constexpr bool kPlainTile = (kFeatures & kAllFeatures) == 0;

// The traits a variant's kernel is built with: its head dim's tile (fwd_traits.h), wide where kWideKeys. The
// generated TUs name them by the variant's causal flag and features too (kFeatures with kKeys128Kernel: the
// variant's 128-key kernel).
template <int kHeadDim, bool kIsCausal, int kFeatures>
inline constexpr FwdTile kVariantTile =
    fwd_tile(kHeadDim, kWideKeys<kHeadDim, kIsCausal, kFeatures>, kPlainTile<kFeatures>, kIsCausal);
template <int kHeadDim, DType kDType, bool kIsCausal, int kFeatures = 0>
using VariantTraits = FwdTraits<kHeadDim, kVariantTile<kHeadDim, kIsCausal, kFeatures>.block_m,
                                kVariantTile<kHeadDim, kIsCausal, kFeatures>.block_n,
                                kVariantTile<kHeadDim, kIsCausal, kFeatures>.stages,
                                kVariantTile<kHeadDim, kIsCausal, kFeatures>.pingpong, typename ElementOf<kDType>::type>;

// Where a launch finds the kernel of these traits. fwd_kernel.h defines `get` as the kernel's own
// symbol, for a TU that compiles the kernel with its launch (a tuning harness: include fwd_kernel.h
// beside fwd_launch.h). A variant's launch TU, which does not include fwd_kernel.h, specializes `get`
// to the fatbin the variant's kernel TU embeds (templates/fwd_instantiate.cu.j2); the kernel TU
// instantiates this struct, and through `get` the kernel (templates/fwd_kernel.cu.j2).
template <class Traits, bool kIsCausal, int kFeatures>
struct FwdKernelEntry {
  static const KernelHandle& get();
};

}  // namespace flashbuild::hopper
