// Which tile a Hopper split-KV call runs, and the decode tile's launch (host code alone; the kernel compiles
// device-only in <variant>_kernel_decode.cu, reached through DecodeTileEntry as the 64-row tile's through
// FwdKernelEntry: fwd_launch.h).
// The decode tile (splitkv_decode_traits.h) takes a call whose query block holds at most kDecodeTileRows rows
// (seqlen_q as the kernel sees it: a GQA group packed into rows by the binding, or a few query positions) at head
// dims 64 and 128. FLASHBUILD_SPLITKV_TILE picks per call, for A/B runs in one process (splitkv_decode_switch.h):
// `decode` (the decode tile wherever it serves the call), `rows64` (the 64-row tile always), unset or `auto` (the
// default rule below).
#pragma once

#include "common/timeline.h"  // a study build's CTA timeline (FLASHBUILD_SPLITKV_TIMELINE); nothing without it
#include "hopper/fwd_launch.h"  // tma_strides, launch_descriptors, sm_count
#include "hopper/splitkv_decode_switch.h"  // splitkv_tile_choice: FLASHBUILD_SPLITKV_TILE
#include "hopper/splitkv_decode_traits.h"

namespace flashbuild::hopper {

// A decode-tile launch's grid: one CTA a tile (SplitTileScheduler's loop then takes one tile a CTA), not the persistent
// grid of two CTAs an SM. Where the tiles outnumber the SMs' slots, the hardware hands each slot the next CTA as its
// last one ends (a dynamic deal), rather than CTA i walking tiles i, i + grid, ... whatever the rates its tiles run
// at. On the H200 (benchmarks/decode_tile_grid/, h200-1; hdim 128 and 64, batch 64 and 128, 4k-64k keys, graph-replayed
// and eager) it ran 0.99-1.00x the persistent grid's time, outputs bit-equal. The launch's tile numbers then go up to
// twice the tiles (tile + gridDim.x), so the count is checked against half of int32 (kDecodeTileRoom).
template <class Scheduler>
int decode_grid(const Scheduler& s) { return s.num_tiles; }
inline constexpr int64_t kDecodeTileRoom = INT32_MAX / 2 + 1;  // check_tile_count's `grid`: tiles <= INT32_MAX / 2

// Whether the decode tile can take the call: its rows fit (a causal query block is bottom-aligned, so its rows are
// the 64-row block's last: the kernel reads those, DecodeTile::kRow0).
inline bool decode_tile_serves(const FwdParams& p) { return p.seqlen_q >= 1 && p.seqlen_q <= kDecodeTileRows; }

// The default takes the decode tile wherever it serves the call: in runs 12 and 13 (benchmarks/decode/README.md, "A
// decode tile") the 64-row tile ran 0.999-1.10x its time graph-replayed in the rows of issue 45's table (run 13).
// So `auto` and `decode` choose alike; `rows64` keeps the 64-row tile.
inline bool use_decode_tile(const FwdParams& p) {
  return decode_tile_serves(p) && splitkv_tile_choice() != SplitKVTile::kRows64;
}

// One launch of the decode tile's kernel: launch_fwd's split-KV launch (fwd_launch.h) with the decode tile's entry
// and shared memory; the same parameters, descriptors (kept from call to call) and scheduler. Returns whether the
// launch merges the call's splits in a cluster (then no split writes fp32 partials, and the combine kernel must not
// run after it, counters or not).
template <int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
bool launch_decode_tile(const FwdParams& params, cudaStream_t stream) {
  static_assert(kIsSplitKV<kFeatures>, "the decode tile is the split-KV kernel's");
  using Traits = DecodeTileBase<kHeadDim, kDType>;
  using KernelParams = FwdKernelParams<Traits, kIsCausal, kFeatures>;
  using Decode = DecodeTileTraits<Traits, kDecodeTileRows>;
  const FwdParams tma_params = tma_strides(params);
  // The cluster merge (SplitMerge::kCluster) where the merge slots hold the call's other splits: one cluster of
  // num_splits CTAs per row: CTA blockIdx.x runs tile blockIdx.x (decode_grid), whose split is blockIdx.x % num_splits,
  // the cluster's rank. Else the merge through L2 (kLanes).
  const int splits = params.num_splits;
  const bool cluster = params.split_merge == SplitMerge::kCluster && splits > 1 && splits <= Decode::kClusterMaxSplits;
  FwdParams kernel_params = params;
  if (params.split_merge == SplitMerge::kCluster && !cluster) { kernel_params.split_merge = SplitMerge::kLanes; }
  const int slots = sm_count() * Traits::kCtasPerSm;
  check_tile_count("the Hopper split-KV", (int64_t(params.seqlen_q) + Traits::kBlockM - 1) / Traits::kBlockM,
                   params.nheads, params.batch, params.num_splits, kDecodeTileRoom);
  const auto descriptors = launch_descriptors<Traits, kFeatures>(tma_params);
  KernelParams kp{kernel_params, descriptors.loads, descriptors.stores,
                  KernelParams::Scheduler::make({params.seqlen_q, Traits::kBlockM, params.nheads, params.batch,
                                                 params.num_splits, slots, 0, 1})};
  const dim3 grid(decode_grid(kp.scheduler));
#if FLASHBUILD_SPLITKV_TIMELINE
  kp.timeline = timeline_launch_buffer(int(grid.x));
#endif
  const bool programmatic = params.dependent_launch != DependentLaunch::kNone;
  DecodeTileEntry<Traits, kIsCausal, kFeatures, kDecodeTileRows>::get().launch(grid, Traits::kNThreads,
                                                                               Decode::kSmemBytes, stream, kp,
                                                                               programmatic, cluster ? splits : 1);
  return cluster;
}

// Two K/V heads a CTA (kPairedHeads, splitkv_decode_traits.h) for a plain decoding call at head dim 64: the binding
// allows it (FwdParams::pair_heads: a packed GQA call of one query, num_splits left to it, nothing appended, the
// one-launch path with the cluster merge) and the call is laid out for it: K/V heads contiguous within a row (two
// heads' 64 columns are then one head's 128), an even count of them, at most kDecodeTileRows / 2 query rows a head,
// query heads contiguous within a batch row of q, out and the LSE (a pair's rows are then one head's), and the pairs
// filling the GPU without splitting the keys (choose_num_splits_hopper over the pairs, as for a head-dim-128 call,
// gives 1). On the H200, graph-replayed (benchmarks/decode_paired_heads/, h200-1): at batch 64 (one split) the pairs
// ran 0.95-0.97x one head a CTA's time (4k-64k keys), at batch 8 (four splits a pair in one cluster, against two)
// 1.04-1.08x; so split calls keep one head a CTA. The variant's own kernel is the plain non-causal one
// (kPairsVariant).
template <int kHeadDim, bool kIsCausal, int kFeatures>
inline constexpr bool kPairsVariant = kHeadDim == 64 && !kIsCausal && (kFeatures & kAllFeatures) == 0;

inline bool pairs_serve(const FwdParams& p) {
  return p.pair_heads && p.head_dim == 64 && p.knew == nullptr && p.split_merge == SplitMerge::kCluster &&
         !p.cu_seqlens_q && !p.cu_seqlens_k && p.nheads == p.nheads_k && p.nheads_k % 2 == 0 &&
         p.seqlen_q >= 1 && 2 * p.seqlen_q <= kDecodeTileRows && p.k_head_stride == p.head_dim &&
         p.v_head_stride == p.head_dim && p.q_head_stride == p.seqlen_q * p.q_row_stride &&
         p.o_head_stride == p.seqlen_q * p.o_row_stride && p.lse_head_stride == p.seqlen_q;
}

// The pairs' parameters: nheads_k / 2 heads of 2 x seqlen_q query rows (head j's rows, then head j + 1's) over K/V
// rows of 128 columns; num_splits for the pairs.
inline FwdParams paired_params(const FwdParams& p, int num_splits) {
  FwdParams q = p;
  q.nheads = q.nheads_k = p.nheads_k / 2;
  q.seqlen_q = 2 * p.seqlen_q;
  q.q_head_stride *= 2, q.o_head_stride *= 2, q.lse_head_stride *= 2;
  q.k_head_stride *= 2, q.v_head_stride *= 2;
  q.num_splits = num_splits;
  return q;
}

// The launch when the call qualifies (pairs_serve, and the pairs take one split); false, nothing launched, otherwise.
// Called once run_splitkv has chosen the decode tile (use_decode_tile: FLASHBUILD_SPLITKV_TILE is read once a call).
// The producer's TMA views: K and V as above (128 columns), Q and O as seqlen_q rows of 128 columns (two query rows
// side by side: the bounds are the tensors'; the kernel fills sQ's rows from q itself and stores O from registers, so
// neither view's rows are what it computes with).
template <DType kDType>
bool launch_decode_pairs(const FwdParams& params, cudaStream_t stream) {
  using Traits = DecodeTileBase<128, kDType>;
  constexpr int kFeatures = kSplitKVKernel | kPairedHeads;
  using KernelParams = FwdKernelParams<Traits, false, kFeatures>;
  using Decode = DecodeTileTraits<Traits, kDecodeTileRows>;
  if (!pairs_serve(params)) { return false; }
  const int splits = choose_num_splits_hopper(params.batch, params.nheads_k / 2, 2 * params.seqlen_q, params.seqlen_k,
                                              128, sm_count());
  if (splits != 1) { return false; }
  const FwdParams pairs = paired_params(params, 1);
  FwdParams views = pairs;
  views.head_dim = 128;
  views.seqlen_q = params.seqlen_q;
  views.q_row_stride *= 2, views.o_row_stride *= 2;
  const FwdParams tma_params = tma_strides(views);
  const int slots = sm_count() * Traits::kCtasPerSm;
  check_tile_count("the Hopper split-KV", 1, pairs.nheads, pairs.batch, 1, kDecodeTileRoom);
  const auto descriptors = launch_descriptors<Traits, kFeatures>(tma_params);
  KernelParams kp{pairs, descriptors.loads, descriptors.stores,
                  KernelParams::Scheduler::make({pairs.seqlen_q, Traits::kBlockM, pairs.nheads, pairs.batch, 1, slots,
                                                 0, 1})};
  const dim3 grid(decode_grid(kp.scheduler));
#if FLASHBUILD_SPLITKV_TIMELINE
  kp.timeline = timeline_launch_buffer(int(grid.x));
#endif
  const bool programmatic = params.dependent_launch != DependentLaunch::kNone;
  DecodeTileEntry<Traits, false, kFeatures, kDecodeTileRows>::get().launch(grid, Traits::kNThreads, Decode::kSmemBytes,
                                                                           stream, kp, programmatic, 1);
  return true;
}

}  // namespace flashbuild::hopper
