// Persistent tile scheduler: the grid is at most one CTA per SM, and CTA i walks tiles i, i + grid,
// i + 2 grid, ... of a fixed order. A tile is one query block of one (batch, head).
//   Non-causal: query blocks vary fastest, so the CTAs running at once share one (batch, head)'s
//   K/V and stream it through L2 together.
//   Causal: a query block's work grows with its index, so the order is longest first (the last
//   query block of every (batch, head), then the one before, ...): the short tiles at the end
//   fill the gaps the long ones leave, the greedy longest-processing-time order. CTAs at the same
//   query block of one (batch, head) still read its K/V in step. Each round of gridDim.x tiles
//   is dealt in turn forwards and backwards (CTA i takes the round's i-th tile, then the next
//   round's i-th from the end): dealt the same way every round, CTA 0 would take the longest
//   tile of each, and at 16k the first CTAs would do ~6% more than the mean while the last idle.
#pragma once

#include <cute/config.hpp>

namespace flashbuild::hopper {

struct TileCoord {
  int m_block;
  int head;
  int batch;
};

template <bool kLongestFirst>
struct PersistentTileScheduler {
  int num_m_blocks;
  int nheads;
  int num_tiles;

  struct Arguments {
    int seqlen_q, block_m, nheads, batch;
  };
  static PersistentTileScheduler make(Arguments const& a) {
    const int m_blocks = (a.seqlen_q + a.block_m - 1) / a.block_m;
    return {m_blocks, a.nheads, m_blocks * a.nheads * a.batch};
  }
  // One CTA per SM at most: each holds a whole SM's registers and most of its shared memory.
  int grid_size(int sm_count) const { return num_tiles < sm_count ? num_tiles : sm_count; }

  CUTE_DEVICE int first_tile() const { return int(blockIdx.x); }
  CUTE_DEVICE int next_tile(int tile) const {
    const int grid = int(gridDim.x);
    if constexpr (kLongestFirst) {
      const int round = tile / grid + 1;  // dealt forwards in even rounds, backwards in odd ones
      return round * grid + ((round & 1) ? grid - 1 - int(blockIdx.x) : int(blockIdx.x));
    } else {
      return tile + grid;
    }
  }
  CUTE_DEVICE bool valid(int tile) const { return tile < num_tiles; }

  CUTE_DEVICE TileCoord decode(int tile) const {
    if constexpr (kLongestFirst) {
      const int heads_batches = num_tiles / num_m_blocks;
      const int hb = tile % heads_batches;
      return {num_m_blocks - 1 - tile / heads_batches, hb % nheads, hb / nheads};
    } else {
      const int hb = tile / num_m_blocks;
      return {tile % num_m_blocks, hb % nheads, hb / nheads};
    }
  }
};

}  // namespace flashbuild::hopper
