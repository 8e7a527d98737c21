// The Hopper split-KV's decode tile: what its launch and its kernel share (host-visible, no kernel code).
//
// The split-KV kernel (SplitKVTraits, fwd_params.h) runs a 64-row wgmma tile of query rows. A decoding call fills
// few of them: GQA 32:8 with one query packs 4 query heads into a K/V head's tile, so its tensor and MUFU work per
// key block was 16x what the call's rows need (benchmarks/decode/README.md, "the hdim-64 kernel under Nsight Compute").
// The decode tile turns the products around so that wgmma's M, which is 64 per instruction, runs over keys:
//   S^T = K Q^T     (M = the block's keys, N = kRowsQ query rows, K = head dim; A = the K stage, K-major,
//                    B = kRowsQ rows of sQ, K-major)
//   O^T += V^T P^T  (M = head dim, N = kRowsQ, K = keys; A = the V stage read MN-major, B = P^T from sP)
// so a key block costs kRowsQ (8 or 16) columns of work instead of 64 rows. The softmax runs down the columns:
// a query's max over the block's keys is each thread's, then its warp's (shuffles over lane / 4), then the
// warpgroup's (one exchange through `exchange` in shared memory and a named barrier).
// Everything around the consumer is the split-KV kernel's as it is: the TMA producer and its rings (FwdMainloop::
// load, on Base's layouts and descriptors, kept from call to call by splitkv_descriptors.h per Base; DecodeTileBase
// below), the scheduler, the partials and the merge (FwdEpilogue::combine_if_last).
// It serves head dims 64 and 128 (O^T's M, the head dim, in whole 64-row wgmmas) and calls of at most kRowsQ rows a
// query block (splitkv_decode_launch.h: decode_tile_serves), non-causal, causal and local alike (the mask reads each
// value's (row, key) as the 64-row tile does).
#pragma once

#include "hopper/fwd_params.h"

namespace flashbuild::hopper {

constexpr bool decode_tile_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }
// Query rows of the tile (wgmma N): 8, so a GQA group of up to 8 query heads (or 8 query positions) fits one tile, and
// larger ones run the 64-row tile. In run 12 (benchmarks/decode/README.md, "A decode tile") the 8-row form ran
// 0.93-1.00x the 16-row one's time graph-replayed, with the same outputs bit for bit; nvcc
// -DFLASHBUILD_HOPPER_DECODE_ROWS=16 builds the 16-row form (a build holds one of them: a kernel TU compiles one kernel).
#ifdef FLASHBUILD_HOPPER_DECODE_ROWS
constexpr int kDecodeTileRows = FLASHBUILD_HOPPER_DECODE_ROWS;
#else
constexpr int kDecodeTileRows = 8;
#endif

// The split-KV tile the decode tile runs on (its producer's boxes, rings and descriptors): SplitKVTraits itself (the
// same type: one set of kept descriptors for both tiles), or with more stages of K/V boxes the same tile with those
// stages and no O buffer of its own (OStore::kDirect: the decode tile's O leaves from registers). At head dim 64 three
// 128-key stages: the decode tile keeps no O buffer, so they fit two CTAs an SM (226 of the SM's 228 KB); at 128 the
// 64-row Q buffer leaves no room for a third. nvcc -DFLASHBUILD_HOPPER_DECODE_STAGES_HDIM64=2 for the A/B.
#ifdef FLASHBUILD_HOPPER_DECODE_STAGES_HDIM64
constexpr int kDecodeTileStagesHdim64 = FLASHBUILD_HOPPER_DECODE_STAGES_HDIM64;
#else
constexpr int kDecodeTileStagesHdim64 = 3;
#endif
constexpr int decode_tile_stages(int head_dim) {
  return head_dim == 64 ? kDecodeTileStagesHdim64 : splitkv_stages(head_dim);
}
template <int kHeadDim, DType kDType>
using DecodeTileBase = std::conditional_t<
    decode_tile_stages(kHeadDim) == splitkv_stages(kHeadDim), SplitKVTraits<kHeadDim, kDType>,
    FwdTraits<kHeadDim, kSplitKVBlockM, hopper_splitkv_block_n(kHeadDim), decode_tile_stages(kHeadDim), false,
              typename ElementOf<kDType>::type, OStore::kDirect, kHopperSplitKVCtasPerSm>>;

template <class Base_, int kRowsQ_>
struct DecodeTileTraits {
  using Base = Base_;  // the split-KV tile whose producer, rings and descriptors this one keeps
  using Element = typename Base::Element;
  static constexpr int kHeadDim = Base::kHeadDim;
  static constexpr int kBlockN = Base::kBlockN;
  static constexpr int kStages = Base::kStages;
  static constexpr int kRowsQ = kRowsQ_;
  static constexpr int kNumMmaThreads = Base::kNumMmaThreads;
  static constexpr int kNThreads = Base::kNThreads;
  static constexpr int kCtasPerSm = Base::kCtasPerSm;
  static_assert(Base::kNumMmaWarpgroups == 1 && !Base::kOAliasesV, "one consumer warpgroup, O not in V's ring");
  static_assert(kRowsQ == 8 || kRowsQ == 16, "wgmma N of 8 or 16 query rows");
  static_assert(kHeadDim % 64 == 0 && kBlockN % 64 == 0, "keys and head dim in whole 64-row wgmmas");

  using TileShapeSt = Shape<Int<kBlockN>, Int<kRowsQ>, Int<kHeadDim>>;  // S^T = K Q^T: (M, N, K)
  using TileShapeOt = Shape<Int<kHeadDim>, Int<kRowsQ>, Int<kBlockN>>;  // O^T = V^T P^T: (M, N, K)
  using TiledMmaSt = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kRowsQ>, Int<kHeadDim>>, GMMA::Major::K,
                           GMMA::Major::K>(),
      Layout<Shape<_1, _1, _1>>{}));
  // V^T: the V stage (keys, head dim) seen as (head dim, keys), head dim contiguous: MN-major A (16-bit types).
  // P^T: (query rows, keys) with the rows contiguous (MN-major B), so a thread's two adjacent columns of S^T are
  // one 32-bit store.
  using TiledMmaOt = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kRowsQ>, Int<kBlockN>>, GMMA::Major::MN,
                           GMMA::Major::MN>(),
      Layout<Shape<_1, _1, _1>>{}));

  using SmemLayoutQ = typename Base::SmemLayoutQ;
  using SmemLayoutK = typename Base::SmemLayoutK;
  using SmemLayoutVt = typename Base::SmemLayoutVt;
  using SmemAtomP = std::conditional_t<kRowsQ == 16, GMMA::Layout_MN_SW32_Atom<Element>, GMMA::Layout_MN_INTER_Atom<Element>>;
  // Two P^T buffers: block j's P is written while block j - 1's P V may still read the other.
  using SmemLayoutP = decltype(tile_to_shape(SmemAtomP{}, Shape<Int<kRowsQ>, Int<kBlockN>, _2>{}));
  // The same buffers as S^T's (keys, rows): what a thread's accumulator values partition.
  using SmemLayoutPt = decltype(composition(
      SmemLayoutP{}, make_ordered_layout(Shape<Int<kBlockN>, Int<kRowsQ>, _2>{}, Step<_2, _1, _3>{})));

  using PipelineKV = typename Base::PipelineKV;

  // The producer (FwdMainloop::load) reads q, k, v and q_full by these names; no O buffer (O leaves from registers).
  struct CoreStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Base::SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Base::SmemLayoutV>> v;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutP>> p;
    // Each warp's column maxima (then sums) of a block, [warp][row]: the warpgroup's exchange.
    alignas(16) float exchange[kNumMmaThreads / cutlass::NumThreadsPerWarp][kRowsQ];
    typename PipelineKV::SharedStorage pipeline_k;
    typename PipelineKV::SharedStorage pipeline_v;
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType q_full;
    alignas(8) cutlass::arch::ClusterBarrier::ValueType o_read;  // named for the producer; unused (no kOAliasesV)
  };
  // The cluster merge (SplitMerge::kCluster, splitkv_cluster_merge.h): what a thread of a split's CTA hands split 0's,
  // its O^T values then its columns' LSEs, as [value][thread] floats (a warp's 128 bytes together), one slot per
  // split after the first. As many slots as fit beside the rest at kCtasPerSm CTAs an SM, three at most: at head dim
  // 64 one (two splits a cluster), at 128 three (four); the launch clusters a call only up to that count.
  static constexpr int kMergeValues = kHeadDim * kRowsQ / kNumMmaThreads + kRowsQ / 4;
  static constexpr int kMergeSlotBytes = kMergeValues * kNumMmaThreads * int(sizeof(float));
  static constexpr int kMergeRoom =
      228 * 1024 / kCtasPerSm - 1024 - int(sizeof(CoreStorage)) - 64;  // 64: the two barriers and alignment
  static constexpr int kMergeSlots = kMergeRoom < 0 ? 0 : (kMergeRoom / kMergeSlotBytes > 3 ? 3 : kMergeRoom / kMergeSlotBytes);
  static constexpr int kClusterMaxSplits = kMergeSlots + 1;
  static_assert(kRowsQ != 8 || kMergeSlots >= 1, "the 8-row tile keeps room for one merge slot: two splits a cluster");
  struct SharedStorage : CoreStorage {
    alignas(16) cute::array_aligned<float, kMergeSlots * kMergeValues * kNumMmaThreads> merge;
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType merge_full;  // split 0's: the slots landed
    alignas(8) cutlass::arch::ClusterBarrier::ValueType merge_empty;  // a sender's: split 0 has read its slot
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024, "the decode tile's CTAs exceed an SM's shared memory");
};

// Two K/V heads a CTA (a bit of kFeatures beside kSplitKVKernel and kKeys128Kernel: its own kernel, in a TU of its
// own, <variant>_kernel_decode_pairs.cu). At head dim 64 a decode tile's K/V box reads 128 B of each token's row of
// all the K/V heads (1 KB at 8 heads), at head dim 128 256 B, and the HBM serves the wider pattern faster: the same
// cache bytes ran 2.5-4.4 % faster graph-replayed at batch 64 as hdim 128 over 4 K/V heads as hdim 64 over 8
// (benchmarks/decode_paired_probe/). So a plain decoding call at head dim 64 runs on the head-dim-128 decode tile over
// pairs of K/V heads: K and V seen as 128 columns (heads 2j and 2j + 1 side by side) of nheads_k / 2 heads, and Q
// block-diagonal in sQ: the pair's query rows of head 2j hold their 64 values in columns 0-63 and zeros in 64-127,
// those of head 2j + 1 the other way round, so that S^T = K Q^T is each row's own head's scores. O^T = V^T P^T then
// holds each row's output in its head's 64 rows of the head dim (the other 64 are discarded at the store).
// splitkv_decode_launch.h says which calls it takes; docs/serving.md what it costs a cache holding NaN or inf.
constexpr int kPairedHeads = 1 << 10;
template <int kFeatures>
inline constexpr bool kIsPaired = (kFeatures & kPairedHeads) != 0;

// Where a launch finds the decode tile's kernel (as FwdKernelEntry, fwd_params.h): splitkv_decode_kernel.h defines
// `get` as the kernel's own symbol, a variant's launch TU specializes it to the fatbin of its <variant>_kernel_decode.cu.
template <class Base, bool kIsCausal, int kFeatures, int kRowsQ>
struct DecodeTileEntry {
  static const KernelHandle& get();
};

}  // namespace flashbuild::hopper
