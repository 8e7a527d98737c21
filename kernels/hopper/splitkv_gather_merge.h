// A study form of the decode tile's cluster merge (benchmarks/decode_gather_merge/): -DFLASHBUILD_SPLITKV_GATHER_MERGE=1.
// The cluster merge (splitkv_cluster_merge.h) hands each split's values into split 0's shared memory, one slot per
// split after the first, so a cluster holds as many splits as split 0 has slots beside its K/V ring: 2 at head dim 64,
// 4 at 128. A call of 16 splits (batch 1 on the H200) merges through L2 instead (FwdEpilogue::combine_if_last), whose
// three round trips took 2.7-3.0 us after the last P V against the cluster's 1.3-1.8
// (benchmarks/decode_cluster_merge/README.md). Here every split keeps its own values in its own slot 0 and the merge is
// shared out: each CTA tells every CTA of the cluster its slot is written (a remote release-arrive on that CTA's
// `merge_full`, counting the splits), waits for all of them, then merges the thread slots t with t % splits == its
// split, reading every split's values of slot t from that split's shared memory (ld.shared::cluster) in
// DecodeTile::merge_in_first's arithmetic and order (split 0 first: the L2 merge's bits), and stores them. A CTA
// leaves only once every CTA has read its slot (`merge_empty`, counting the splits). One slot a CTA whatever the
// split count: clusters of up to kGatherMaxSplits (16: a non-portable cluster size, common/kernel_library.h).
#pragma once

#include <cute/arch/cluster_sm90.hpp>  // set_block_rank (mapa)
#include <cute/config.hpp>

#include "hopper/splitkv_cluster_merge.h"  // cluster_arrive_release, cluster_wait_acquire

#ifndef FLASHBUILD_SPLITKV_GATHER_MERGE
#define FLASHBUILD_SPLITKV_GATHER_MERGE 0
#endif

namespace flashbuild::hopper {

inline constexpr bool kGatherMerge = FLASHBUILD_SPLITKV_GATHER_MERGE != 0;
inline constexpr int kGatherMaxSplits = 16;

// Four bytes of CTA `rank`'s shared memory at the offset `local` has in this CTA's.
CUTE_DEVICE float cluster_load(float const* local, int rank) {
  float value = 0.f;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint32_t from = cute::set_block_rank(cute::cast_smem_ptr_to_uint(local), uint32_t(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(value) : "r"(from));
#endif
  return value;
}

// This CTA's part of the merge (see the top); every thread of the consumer warpgroup calls it, once a CTA (the decode
// tile's launch is one CTA a tile: decode_grid). Returns whether this thread's slot is this CTA's to store: then tOt
// and lse hold the merged O^T values and LSEs (as one split would). phase: set to 1, so that the kernel's end waits
// for the first phase of merge_empty (every CTA has read this one's slot) before the CTA leaves.
template <class Tile, class FragO>
CUTE_DEVICE bool gather_merge(typename Tile::SharedStorage& storage, int split, int splits, int thread_idx,
                              FragO& tOt, float (&lse)[Tile::kCols], uint32_t& phase) {
  constexpr int kCols = Tile::kCols;
  constexpr int kMO = decltype(size<1>(tOt))::value;
  constexpr int kLse = kCols * kMO * 2;  // the first LSE's value index (as send_to_first lays a slot out)
  int v = 0;
  CUTE_UNROLL
  for (int c = 0; c < kCols; ++c) {
    CUTE_UNROLL
    for (int i = 0; i < kMO; ++i) {
      CUTE_UNROLL
      for (int v1 = 0; v1 < 2; ++v1, ++v) { *Tile::merge_slot(storage, 0, v, thread_idx) = tOt(Tile::value(c, v1, i)); }
    }
  }
  CUTE_UNROLL
  for (int c = 0; c < kCols; ++c) {
    *Tile::merge_slot(storage, 0, kLse + c, thread_idx) = lse[c] == INFINITY ? -INFINITY : lse[c];
  }
  asm volatile("fence.acq_rel.cluster;\n" ::: "memory");  // this thread's slot writes, before the arrivals below
  Tile::exchange_sync();
  if (thread_idx < splits) { cluster_arrive_release(&storage.merge_full, thread_idx); }
  cluster_wait_acquire(&storage.merge_full, 0);
  const bool mine = thread_idx % splits == split;
  if (mine) {
    float got[kGatherMaxSplits][kCols];
    CUTE_UNROLL
    for (int s = 0; s < kGatherMaxSplits; ++s) {
      CUTE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        got[s][c] = s < splits ? cluster_load(Tile::merge_slot(storage, 0, kLse + c, thread_idx), s) : -INFINITY;
      }
    }
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      float lse_max = got[0][c];
      CUTE_UNROLL
      for (int s = 1; s < kGatherMaxSplits; ++s) {
        if (s < splits) { lse_max = fmaxf(lse_max, got[s][c]); }
      }
      float sum = 0.f;
      if (lse_max != -INFINITY) {
        CUTE_UNROLL
        for (int s = 0; s < kGatherMaxSplits; ++s) {
          if (s < splits) { sum += __expf(got[s][c] - lse_max); }
        }
      }
      const float total = sum == 0.f ? INFINITY : lse_max + __logf(sum);  // +inf: the row saw no key
      float weight[kGatherMaxSplits];
      CUTE_UNROLL
      for (int s = 0; s < kGatherMaxSplits; ++s) { weight[s] = __expf(got[s][c] - total); }
      int at = c * kMO * 2;
      CUTE_UNROLL
      for (int i = 0; i < kMO; ++i) {
        CUTE_UNROLL
        for (int v1 = 0; v1 < 2; ++v1, ++at) {
          float out = 0.f;
          if (sum != 0.f) {
            CUTE_UNROLL
            for (int s = 0; s < kGatherMaxSplits; ++s) {
              if (s < splits) { out += weight[s] * cluster_load(Tile::merge_slot(storage, 0, at, thread_idx), s); }
            }
          }
          tOt(Tile::value(c, v1, i)) = out;
        }
      }
      lse[c] = total;
    }
  }
  // Every read of the others' slots done (the loads' values are in registers) before telling them so.
  Tile::exchange_sync();
  if (thread_idx < splits) { cluster_arrive_release(&storage.merge_empty, thread_idx); }
  phase = 1;
  return mine;
}

}  // namespace flashbuild::hopper
