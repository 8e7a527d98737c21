// Persistent tile scheduler: the grid is at most one CTA per SM (two for the split-KV kernel's traits, kCtasPerSm),
// and CTA i walks tiles i, i + grid,
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
//   Causal with few query blocks per head (a short sequence, many (batch, head)s): a round of that
//   order holds one query block of each of gridDim.x heads, whose K/V (together more than L2, e.g.
//   132 heads of 512 KB at 1k, hdim 128) are read again, from DRAM, by the next query block ~2
//   rounds later. There the CTAs first take pairs: query blocks m and M - 1 - m of one (batch,
//   head), the long one first (together as long as any other pair), the pairs of a head on adjacent
//   CTAs at once, so its K/V is read about once; the last pairs' tiles go longest first as above
//   (pair_rounds, make()). On the H200 at 1k (16k tokens, causal, fp16, in turns with the tree
//   before): DRAM reads of a call 638 -> 205 MB at hdim 128, 651 -> 280 MB at 256 (ncu); 1.046x
//   (hdim 64), 1.163x (128), 1.22-1.23x (192, 256, against the same tree without pairs)
//   (benchmarks/fwd_tile_turnover). The static deal of pairs and tail evens out the CTAs' key blocks
//   about as well as longest first alone up to 2k (max / mean 1.003-1.015 against 1.024-1.031; at
//   1k, hdim 192/256, 1.05-1.07 against 1.03, and the L2 wins), less well from 4k (1.010-1.021
//   against 1.000-1.014: balance.py there). Timed alone (the card at its power limit), pairs at every
//   length win from 8k too: a quarter of the DRAM reads at 16k buys clock (hopper/fwd_pairs.h), so by default
//   they run at every length, with two rounds of pairs left to the tail past 32 query blocks a head; the
//   launcher picks the setting per launch (FLASHBUILD_HOPPER_FWD_PAIRS, hopper/fwd_launch.h). make() lays the deal out on the host (pair_rounds, the tail's segments), so a
//   tile's decode is a few compares and two multiplicative divisions, the same code with pairs or
//   without (without: the plain longest-first order; benchmarks/fwd_tile_turnover/deal_check.cu walks
//   the deal on the host and checks both).
#pragma once

#include <cute/config.hpp>

#include <type_traits>

#include <cutlass/fast_math.h>

#include "common/params.h"

namespace flashbuild::hopper {

struct TileCoord {
  int m_block;
  int head;
  int batch;
  int split = 0;  // the split-KV kernel's slice of the keys (SplitTileScheduler); 0 elsewhere
  // The split-KV kernel's (SplitTileScheduler): the tile's slices of its keys, num_splits (split is one of them; more
  // than one: fp32 partials and the merge).
  int splits = 1;
};

// Where batch b's sequences lie in the TMA views of Q/O and K/V (fwd_mainloop.h, fwd_epilogue.h), and how
// long they are. Dense: the views are (seqlen, head_dim, heads, batch) and sequence b starts at row 0
// of batch coordinate b. Packed (cu_seqlens): a view is the whole (total, head_dim, heads) tensor as
// batch 0, and sequence b starts at row cu_seqlens[b]; the scheduler's tiles cover the longest
// sequence, so a tile may start past a shorter one's end (it has no rows: has_rows()).
// Lengths as the Ampere path takes them (common/block_info.h): with cu_seqlens_k, seqused_k is not read
// (the backward has no seqused_k).
struct SeqRange {
  int seqlen_q;
  int seqlen_k;
  int q_row0;  // the sequence's first row in the Q/O views
  int k_row0;  // ... and in the K/V views
  int q_batch;  // the batch coordinate of the Q/O views
  int k_batch;  // ... and of the K/V views
  int q_skip = 0;  // rows before the sequence's first (bottom_aligned): computed, never stored

  template <class Params>  // FwdParams or BwdParams
  CUTE_DEVICE static SeqRange of(Params const& p, int batch) {
    SeqRange s;
    if (p.cu_seqlens_q) {
      s.q_row0 = p.cu_seqlens_q[batch];
      s.seqlen_q = p.cu_seqlens_q[batch + 1] - s.q_row0;
      s.q_batch = 0;
    } else {
      s.q_row0 = 0, s.seqlen_q = p.seqlen_q, s.q_batch = batch;
    }
    if (p.cu_seqlens_k) {
      s.k_row0 = p.cu_seqlens_k[batch];
      s.seqlen_k = p.cu_seqlens_k[batch + 1] - s.k_row0;
      s.k_batch = 0;
    } else {
      s.k_row0 = 0, s.seqlen_k = dense_seqlen_k(p, batch), s.k_batch = batch;
    }
    return s;
  }
  CUTE_DEVICE static int dense_seqlen_k(FwdParams const& p, int batch) { return p.seqused_k ? p.seqused_k[batch] : p.seqlen_k; }
  CUTE_DEVICE static int dense_seqlen_k(BwdParams const& p, int) { return p.seqlen_k; }
  CUTE_DEVICE bool has_rows(int m_block, int block_m) const { return m_block * block_m < seqlen_q; }

  // The causal forward's query blocks, aligned to the sequence's last row: when seqlen_q is not a
  // multiple of block_m, the part block is the first (its rows see the fewest keys), not the last
  // (which sees them all: at hdim 64's 192-row tiles and 4k queries, 128 rows of it were padding,
  // ~6 % of a causal call's work). The view starts q_skip rows early and is q_skip rows longer, so
  // the mask (which depends on seqlen_k - seqlen_q and the row), the key blocks and the block count
  // ceil(seqlen_q / block_m) hold as they are; the skipped rows load as TMA's zeros (dense) or the
  // previous sequence's rows (packed), see no key or garbage, and the epilogue stores none of them.
  CUTE_DEVICE SeqRange bottom_aligned(int block_m) const {
    SeqRange s = *this;
    s.q_skip = (block_m - seqlen_q % block_m) % block_m;
    s.q_row0 -= s.q_skip;
    s.seqlen_q += s.q_skip;
    return s;
  }
};

// The TMA views' extents (SeqRange): packed tensors are one batch of all their rows; a paged cache
// (the forward's block_table) is a batch of page_size rows per page (FwdMainloop::key_box).
struct ViewExtents {
  int rows_q, rows_k, batches_q, batches_k;
};
template <class Params>  // FwdParams or BwdParams
CUTE_HOST_DEVICE ViewExtents view_extents(Params const& p) {
  ViewExtents e{p.cu_seqlens_q ? p.total_q : p.seqlen_q, p.cu_seqlens_k ? p.total_k : p.seqlen_k,
                p.cu_seqlens_q ? 1 : p.batch, p.cu_seqlens_k ? 1 : p.batch};
  if constexpr (std::is_same_v<Params, FwdParams>) {
    if (p.block_table) {
      e.rows_k = p.page_size, e.batches_k = p.num_pages;
    } else if (p.num_pages > 0) {  // a KV cache call: the cache's own batch rows (cache_batch_idx picks among them)
      e.batches_k = p.num_pages;
    }
  }
  return e;
}

// The longest-first tail as the host lays it out (PersistentTileScheduler::make): its tiles, by their index q in
// the tail's deal, fall into at most five segments of query-block levels, each level of a segment holding the
// (batch, head)s hb0 .. hb0 + heads - 1: levels M - 1 .. M - j0 (heads h0 + 1 on: their pairs all went to the
// tail), M - 1 - j0 down to the middle (h0 on: head h0's pairs from j0 on too), the middle block of odd M (every
// head), the levels below it down to j0 (h0 on), and j0 - 1 .. 0 (h0 + 1 on), where the pair rounds dealt the
// pair units before unit h0 x (M / 2) + j0. Without pair rounds one segment: every level, every head, the
// longest-first order of the top. The device picks a tile's segment with a few compares and divides once (by
// a divisor precomputed here), instead of recomputing the layout per tile.
struct TailSegment {
  int q0 = 0;     // the tail index of its first tile (the tail's length for a segment not in use)
  int m_top = 0;  // its first, longest level
  int hb0 = 0;    // the first (batch, head) of each of its levels
  cutlass::FastDivmod heads;  // (batch, head)s a level
};
constexpr int kTailSegments = 5;

template <bool kLongestFirst>
struct PersistentTileScheduler {
  int num_m_blocks = 0;
  int nheads = 0;
  int num_tiles = 0;
  // Longest first (see the top): pair_rounds rounds of pairs, then tail_tiles tiles longest first.
  int pair_rounds = 0;
  int tail_tiles = 0;
  cutlass::FastDivmod pairs_div;   // M / 2: a pair unit's (batch, head) and pair
  cutlass::FastDivmod nheads_div;  // a (batch, head)'s batch and head
  TailSegment tail[kTailSegments];

  struct Arguments {
    int seqlen_q, block_m, nheads, batch;
    int num_splits = 1;  // read by SplitTileScheduler alone
    int sm_count = 0;    // the grid (grid_size): pairs need it; 0 for none
    // Pairs when M = ceil(seqlen_q / block_m) is at most this (0: none). The launcher sets it only where the
    // tiles' lengths grow evenly with m (causal, dense), from FLASHBUILD_HOPPER_FWD_PAIRS (fwd_launch.h).
    int pair_max_blocks = 0;
    // Whole rounds of pairs left to the tail (at least 1): its longest-first deal then has enough tiles to
    // even out the CTAs' ends. 1 as measured; more evens long calls out better (balance.py --tail-rounds).
    int pair_tail_rounds = 1;
  };
  static PersistentTileScheduler make(Arguments const& a) {
    const int m_blocks = (a.seqlen_q + a.block_m - 1) / a.block_m;
    PersistentTileScheduler s;
    s.num_m_blocks = m_blocks, s.nheads = a.nheads, s.num_tiles = m_blocks * a.nheads * a.batch;
    if constexpr (kLongestFirst) {
      const int grid = s.grid_size(a.sm_count), hbs = a.nheads * a.batch, pairs = m_blocks / 2;
      s.nheads_div = cutlass::FastDivmod(a.nheads > 0 ? a.nheads : 1);  // no heads: no tiles, never read
      if (grid > 0 && m_blocks >= 2 && m_blocks <= a.pair_max_blocks) {
        // Whole rounds of pairs but the last pair_tail_rounds (the tail's, see Arguments).
        const int64_t rounds = int64_t(pairs) * hbs / grid, tail = a.pair_tail_rounds > 1 ? a.pair_tail_rounds : 1;
        s.pair_rounds = rounds > tail ? int(rounds - tail) : 0;
      }
      if (s.pair_rounds > 0) { s.pairs_div = cutlass::FastDivmod(pairs); }
      const int paired = s.pair_rounds * grid;  // pair units dealt before the tail: < pairs x hbs
      const int h0 = pairs > 0 ? paired / pairs : 0, j0 = pairs > 0 ? paired % pairs : 0, rest = hbs - h0;
      int n = 0, q = 0, top_levels = 0;  // segments so far, their tiles, the last one's levels
      auto add = [&](int levels, int m_top, int hb0, int heads) {
        if (levels <= 0 || heads <= 0) { return; }
        TailSegment* last = n > 0 ? &s.tail[n - 1] : nullptr;
        if (last && last->hb0 == hb0 && last->heads.divisor == heads && last->m_top - top_levels == m_top) {
          top_levels += levels;  // the levels below the last segment's, of the same heads: one segment
        } else {
          s.tail[n++] = TailSegment{q, m_top, hb0, cutlass::FastDivmod(heads)};
          top_levels = levels;
        }
        q += levels * heads;
      };
      add(j0, m_blocks - 1, h0 + 1, rest - 1);
      add(pairs - j0, m_blocks - 1 - j0, h0, rest);
      add(m_blocks & 1, pairs, 0, hbs);
      add(pairs - j0, pairs - 1, h0, rest);
      add(j0, j0 - 1, h0 + 1, rest - 1);
      s.tail_tiles = q;  // num_tiles - 2 x paired: each tile once, in the pairs or the tail
      for (int i = n; i < kTailSegments; ++i) { s.tail[i].q0 = q; }
    }
    return s;
  }
  // One CTA per SM at most: each holds a whole SM's registers and most of its shared memory.
  int grid_size(int sm_count) const { return num_tiles < sm_count ? num_tiles : sm_count; }

  // Longest first, `tile` is the CTA's step: 2 x pair_rounds steps of pairs, then the tail's.
  CUTE_DEVICE int first_tile() const { return kLongestFirst ? 0 : int(blockIdx.x); }
  CUTE_DEVICE int next_tile(int tile) const { return kLongestFirst ? tile + 1 : tile + int(gridDim.x); }
  CUTE_DEVICE bool valid(int tile) const { return valid_at(tile, int(blockIdx.x), int(gridDim.x)); }
  CUTE_DEVICE TileCoord decode(int tile) const { return decode_at(tile, int(blockIdx.x), int(gridDim.x)); }

  // The same for CTA `cta` of `grid` (host code can walk the deal: benchmarks/fwd_tile_turnover/deal_check.cu).
  CUTE_HOST_DEVICE bool valid_at(int tile, int cta, int grid) const {
    if constexpr (kLongestFirst) {
      return tile < 2 * pair_rounds || tail_index(tile, cta, grid) < tail_tiles;
    } else {
      return tile < num_tiles;
    }
  }
  // The tail's tiles dealt round by round, forwards in even rounds and backwards in odd ones.
  CUTE_HOST_DEVICE int tail_index(int step, int cta, int grid) const {
    const int round = step - 2 * pair_rounds;
    return round * grid + ((round & 1) ? grid - 1 - cta : cta);
  }
  CUTE_HOST_DEVICE TileCoord decode_at(int tile, int cta, int grid) const {
    int m, hb;
    if constexpr (kLongestFirst) {
      if (tile < 2 * pair_rounds) {  // pair unit u = hb x (M / 2) + j: query blocks M - 1 - j, then j
        int j;
        pairs_div(hb, j, (tile >> 1) * grid + cta);
        m = (tile & 1) ? j : num_m_blocks - 1 - j;
      } else {
        const int q = tail_index(tile, cta, grid);
        TailSegment seg = tail[0];
        CUTE_UNROLL
        for (int i = 1; i < kTailSegments; ++i) {
          if (q >= tail[i].q0) { seg = tail[i]; }  // a segment not in use starts at tail_tiles: never taken
        }
        int level, at;
        seg.heads(level, at, q - seg.q0);
        m = seg.m_top - level, hb = seg.hb0 + at;
      }
      int batch, head;
      nheads_div(batch, head, hb);
      return {m, head, batch};
    } else {
      hb = tile / num_m_blocks, m = tile % num_m_blocks;
      return {m, hb % nheads, hb / nheads};
    }
  }
};

// The split-KV kernel's tiles (run_splitkv, hopper/splitkv_launch.h), persistent as above for the 64-row tile (the
// decode tile's launch gives each tile a CTA of its own: splitkv_decode_launch.h, decode_grid): one query block of one
// (batch, head) and one of num_splits slices of its keys. The splits of a query block vary fastest, so the CTAs
// running at once read one (batch, head)'s K/V side by side; decoding has few query blocks per head, so no
// longest-first order. (A stream-K deal of the key blocks over the CTAs lost to it and was taken out:
// benchmarks/decode/README.md, "A stream-K deal".)
struct SplitTileScheduler {
  int num_m_blocks;
  int nheads;
  int num_splits;
  int num_tiles;  // tiles x num_splits

  using Arguments = PersistentTileScheduler<false>::Arguments;
  static SplitTileScheduler make(Arguments const& a) {
    const int m_blocks = (a.seqlen_q + a.block_m - 1) / a.block_m;
    return {m_blocks, a.nheads, a.num_splits, m_blocks * a.nheads * a.batch * a.num_splits};
  }
  int grid_size(int sm_count) const { return num_tiles < sm_count ? num_tiles : sm_count; }

  CUTE_DEVICE int first_tile() const { return first_tile_at(int(blockIdx.x)); }
  CUTE_DEVICE int next_tile(int tile) const { return next_tile_at(tile, int(gridDim.x)); }
  CUTE_DEVICE bool valid(int tile) const { return valid_at(tile, int(blockIdx.x)); }
  CUTE_DEVICE TileCoord decode(int tile) const { return decode_at(tile, int(blockIdx.x)); }

  // The same for CTA `cta` of a grid of `grid` (grid_size): host code walks the deal (tests/host/splitkv_deal_walk.cu).
  CUTE_HOST_DEVICE int first_tile_at(int cta) const { return cta; }
  CUTE_HOST_DEVICE int next_tile_at(int tile, int grid_ctas) const { return tile + grid_ctas; }
  CUTE_HOST_DEVICE bool valid_at(int tile, int) const { return tile < num_tiles; }
  CUTE_HOST_DEVICE TileCoord decode_at(int tile, int) const {
    const int split = tile % num_splits;
    const int rest = tile / num_splits;
    const int hb = rest / num_m_blocks;
    return {rest % num_m_blocks, hb % nheads, hb / nheads, split, num_splits};
  }
};

}  // namespace flashbuild::hopper
