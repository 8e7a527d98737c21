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
// and shared memory; the same parameters, descriptors (kept from call to call) and scheduler.
template <int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void launch_decode_tile(const FwdParams& params, cudaStream_t stream) {
  static_assert(kIsSplitKV<kFeatures>, "the decode tile is the split-KV kernel's");
  using Traits = DecodeTileBase<kHeadDim, kDType>;
  using KernelParams = FwdKernelParams<Traits, kIsCausal, kFeatures>;
  using Decode = DecodeTileTraits<Traits, kDecodeTileRows>;
  const FwdParams tma_params = tma_strides(params);
  // The cluster merge (SplitMerge::kCluster) where the merge slots hold the call's other splits: one cluster of
  // num_splits CTAs per row, the grid a whole number of clusters so that each CTA keeps its split
  // (SplitTileScheduler deals tile blockIdx.x + k x grid: split blockIdx.x % num_splits, the cluster's rank). Else
  // the merge through L2 (kLanes).
  const int splits = params.num_splits;
  const bool cluster = params.split_merge == SplitMerge::kCluster && splits > 1 && splits <= Decode::kClusterMaxSplits;
  FwdParams kernel_params = params;
  if (params.split_merge == SplitMerge::kCluster && !cluster) { kernel_params.split_merge = SplitMerge::kLanes; }
  const int slots = sm_count() * Traits::kCtasPerSm;
  check_tile_count("the Hopper split-KV", (int64_t(params.seqlen_q) + Traits::kBlockM - 1) / Traits::kBlockM,
                   params.nheads, params.batch, params.num_splits, slots);
  const auto descriptors = launch_descriptors<Traits, kFeatures>(tma_params);
  KernelParams kp{kernel_params, descriptors.loads, descriptors.stores,
                  KernelParams::Scheduler::make({params.seqlen_q, Traits::kBlockM, params.nheads, params.batch,
                                                 params.num_splits, slots, 0, 1})};
  const dim3 grid(kp.scheduler.grid_size(cluster ? slots / splits * splits : slots));
#if FLASHBUILD_SPLITKV_TIMELINE
  kp.timeline = timeline_launch_buffer(int(grid.x));
#endif
  const bool programmatic = params.dependent_launch != DependentLaunch::kNone;
  DecodeTileEntry<Traits, kIsCausal, kFeatures, kDecodeTileRows>::get().launch(grid, Traits::kNThreads,
                                                                               Decode::kSmemBytes, stream, kp,
                                                                               programmatic, cluster ? splits : 1);
}

}  // namespace flashbuild::hopper
