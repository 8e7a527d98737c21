// A study form of the decode tile's start (benchmarks/decode_prefetch/): -DFLASHBUILD_SPLITKV_PREFETCH=N. A decode
// CTA launched programmatically (splitkv_dependent_launch.h) may be resident while the previous kernel still runs,
// but reads nothing before griddepcontrol.wait, so its first K stage lands 2.4-2.9 us after the wait returns
// (benchmarks/decode_timeline/README.md): a whole HBM round trip at the start of every call. Here the producer's
// leader first asks L2 for its first tile's first N boxes of K and of V (cp.async.bulk.prefetch.tensor through the
// same descriptors), before the wait. A prefetch writes nothing and L2 is the GPU's point of coherence: if the
// previous kernel writes those lines afterwards, later loads see its writes. The indices that place the boxes
// (cache_seqlens, cache_batch_idx) are read before the wait, so they may be the previous kernel's old values: that
// only moves what is prefetched, never what is computed. Calls with a block table, leftpad or appended keys take
// no prefetch here (their indices would need the checks' bounds before a read).
#pragma once

#include <cute/config.hpp>
#include <cute/tensor.hpp>

#include "hopper/tile_scheduler.h"  // TileCoord, SeqRange

#ifndef FLASHBUILD_SPLITKV_PREFETCH
#define FLASHBUILD_SPLITKV_PREFETCH 0
#endif

namespace flashbuild::hopper {

inline constexpr int kPrefetchBoxes = FLASHBUILD_SPLITKV_PREFETCH;

// One box's L2 prefetch, instruction by instruction as tma_load_box (utils.h) loads it.
template <int kRows, int kHeadDim, class Tma, class GmemCoords>
CUTE_DEVICE void tma_prefetch_box(Tma const& tma, GmemCoords const& g, int row0, int head, int batch) {
  constexpr int kCols = Tma::NumValSrc / kRows;
  static_assert(kCols * kRows == Tma::NumValSrc && kHeadDim % kCols == 0, "expects whole rows per TMA instruction");
  using Box = cute::Layout<cute::Int<Tma::NumValSrc>>;
  CUTE_UNROLL
  for (int i = 0; i < kHeadDim / kCols; ++i) {
    cute::prefetch(tma, cute::make_tensor(cute::make_inttuple_iter(g(row0, i * kCols, head, batch)), Box{}));
  }
}

// The leader's prefetch of its first tile's last kPrefetchBoxes key blocks (the producer loads the last first).
template <class Producer, int kBlockM, bool kIsCausal, class Params, class Scheduler>
CUTE_DEVICE void prefetch_first_keys(Params const& params, Scheduler const& scheduler) {
  if constexpr (kPrefetchBoxes > 0) {
    FwdParams const& p = params.fwd;
    if (p.block_table || p.cache_leftpad || p.knew || p.cu_seqlens_k) { return; }
    const int t = scheduler.first_tile();
    if (!scheduler.valid(t)) { return; }
    const TileCoord tile = scheduler.decode(t);
    SeqRange seq = SeqRange::of(p, tile.batch);
    int used = p.seqused_k ? p.seqused_k[tile.batch] : p.seqlen_k;
    used = used < 0 ? 0 : (used > p.seqlen_k ? p.seqlen_k : used);  // a bad value: a prefetch of nothing useful
    seq.seqlen_k = used;
    seq.k_batch = p.cache_batch_idx ? p.cache_batch_idx[tile.batch] : tile.batch;
    if constexpr (kIsCausal) { seq = seq.bottom_aligned(kBlockM); }
    const typename Producer::Keys k = Producer::keys(p, seq, tile);
    constexpr int kHeadDim = Producer::kHeadDim, kBlockN = Producer::kBlockN;
    const int head_k = tile.head / (p.nheads / p.nheads_k);
    auto const& mp = params.mainloop;
    auto mK = mp.tma_k.get_tma_tensor(cute::make_shape(p.seqlen_k, int32_t(kHeadDim), p.nheads_k, p.batch));
    auto mV = mp.tma_v.get_tma_tensor(cute::make_shape(p.seqlen_k, int32_t(kHeadDim), p.nheads_k, p.batch));
    for (int n = k.n_block_max - 1, i = 0; n >= k.n_block_min && i < kPrefetchBoxes; --n, ++i) {
      tma_prefetch_box<kBlockN, kHeadDim>(mp.tma_k, mK, n * kBlockN, head_k, seq.k_batch);
      tma_prefetch_box<kBlockN, kHeadDim>(mp.tma_v, mV, n * kBlockN, head_k, seq.k_batch);
    }
  }
}

}  // namespace flashbuild::hopper
