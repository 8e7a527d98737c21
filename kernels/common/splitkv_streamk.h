// The stream-K deal of the Hopper split-KV's persistent CTAs (hopper/tile_scheduler.h, SplitTileScheduler), and
// FLASHBUILD_SPLITKV_DEAL, which picks it per call. Header-only, no CUDA or CuTe needed: the binding sizes the partial
// buffers with it, the kernels walk it, tests/fuzz compiles it with the host compiler and walks every CTA's pieces.
//
// The splits deal (the default) gives every tile (a 64-row query block of one (batch, head)) num_splits slices of its
// keys: tiles x num_splits CTAs' worth of work, which quantises on the grid's slots (two CTAs an SM). At batch 64 with
// 8 KV heads, 512 tiles of one split on 264 slots: 248 slots take two tiles and 16 one. At batch 8, 64 tiles x 2
// splits = 128 CTAs on 132 SMs. The stream-K deal cuts the work itself evenly instead: its items are (tile, key
// block), tiles x key_blocks of them in tile order (blocks of the call's key capacity, so the host never reads
// cache_seqlens), and CTA c of G takes the contiguous items [c W / G, (c + 1) W / G). A CTA's range crosses tiles in
// pieces (tile, [first, end) blocks); a tile covered by one piece writes O directly, a tile of several writes its
// pieces' fp32 partials at (piece index, tile) and the last piece to arrive merges them (hopper/fwd_epilogue.h,
// combine_if_last, with the tile's own piece count). A piece whose blocks lie past a row's keys (a shorter
// cache_seqlens, a causal row's limit) sees no key: its LSE is -inf and it weighs nothing in the merge.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/env_value.h"

#if defined(__CUDACC__)
#define FLASHBUILD_STREAMK_HD __host__ __device__ __forceinline__
#else
#define FLASHBUILD_STREAMK_HD inline
#endif

namespace flashbuild {

// Which deal a Hopper split-KV call with num_splits = 0 (auto) takes; a forced num_splits keeps the splits.
// Zero, as a zeroed FwdParams has it, is the splits.
enum class SplitKVDeal : int { kSplits = 0, kStreamK = 1 };

// FLASHBUILD_SPLITKV_DEAL, read by the binding at every call so one process can time both in turns
// (benchmarks/decode/decode_table.py --paths deal=streamk): `streamk`, `splits`, `auto`, unset or empty (the default:
// the splits, until an A/B on the GPU says otherwise). Another value is an error naming the variable and its values.
inline SplitKVDeal splitkv_deal_choice() {
  const char* v = std::getenv("FLASHBUILD_SPLITKV_DEAL");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0 || std::strcmp(v, "splits") == 0) {
    return SplitKVDeal::kSplits;
  }
  if (std::strcmp(v, "streamk") == 0) { return SplitKVDeal::kStreamK; }
  throw std::runtime_error("flashbuild: FLASHBUILD_SPLITKV_DEAL='" + shown_env_value(v) +
                           "' is not a split-KV deal: set streamk (the key blocks dealt evenly over the persistent "
                           "CTAs), splits (num_splits slices of every tile) or auto, or unset it (unset "
                           "FLASHBUILD_SPLITKV_DEAL) for the default");
}

// A CTA's range holds at least this many keys (two 64-key blocks, one 128-key block): the splits deal's shortest
// split on two CTAs an SM (common/splitkv_heuristic.h, choose_num_splits_hopper).
constexpr int kStreamKMinKeys = 128;
constexpr int streamk_min_blocks(int block_n) { return block_n >= kStreamKMinKeys ? 1 : kStreamKMinKeys / block_n; }

// The most pieces a tile takes: one lane's LSE each in the merge's first chunk of 32 (common/splitkv_combine.h,
// combine_row_lanes: more walk a slower loop), and within the partial slots a call may have (kMaxSplits).
constexpr int kStreamKMaxPieces = 32;

// The deal of one launch: W = items (tiles x key_blocks) over `grid` CTAs, and the most pieces a tile can have.
struct StreamKDeal {
  int64_t items = 0;
  int key_blocks = 0;
  int grid = 0;
  int max_pieces = 0;
};

// CTA c's first item, and the CTA whose range holds item x (the largest c with start(c) <= x).
FLASHBUILD_STREAMK_HD int64_t streamk_start(int64_t items, int grid, int cta) { return items * cta / grid; }
FLASHBUILD_STREAMK_HD int streamk_cta_of(int64_t items, int grid, int64_t x) {
  return int(((x + 1) * grid - 1) / items);
}

// An upper bound of a tile's pieces: the B blocks [x, x + B) of a tile meet the range of its first block and those
// starting at x + 1 .. x + B - 1, the c with x < floor(c W / G) <= x + B - 1, i.e. (x + 1) G / W <= c < (x + B) G / W:
// at most ceil((B - 1) G / W) of them. And at most B (a piece holds a block at least, with W >= G).
inline int streamk_max_pieces(int64_t items, int key_blocks, int grid) {
  if (key_blocks <= 1 || grid <= 1) { return 1; }
  const int64_t bound = 1 + ((int64_t(key_blocks) - 1) * grid + items - 1) / items;
  return int(bound < key_blocks ? bound : key_blocks);
}

// The deal: as many CTAs as slots (two an SM), fewer where a range would hold under min_blocks blocks, and fewer where
// a tile could take more than max_pieces pieces (kStreamKMaxPieces). Items must fit 31 bits (the kernels'
// loop counters): the binding takes the deal only then (streamk_fits).
inline StreamKDeal streamk_deal(int64_t tiles, int key_blocks, int slots, int min_blocks, int max_pieces) {
  StreamKDeal d;
  d.items = tiles * key_blocks;
  d.key_blocks = key_blocks;
  if (d.items <= 0 || slots <= 0) { return d; }
  int64_t grid = d.items / (min_blocks > 1 ? min_blocks : 1);
  if (grid > slots) { grid = slots; }
  if (grid < 1) { grid = 1; }
  // At most `slots` steps of a few operations (under a microsecond of the call's host time).
  while (grid > 1 && streamk_max_pieces(d.items, key_blocks, int(grid)) > max_pieces) { --grid; }
  d.grid = int(grid);
  d.max_pieces = streamk_max_pieces(d.items, key_blocks, d.grid);
  return d;
}
inline bool streamk_fits(int64_t tiles, int key_blocks) { return tiles * key_blocks <= int64_t(INT32_MAX) / 2; }

// The launchers' argument (SplitTileScheduler's streamk_key_blocks): a tile's key blocks of the call's capacity
// (seqlen_k) with the stream-K deal, 0 with the splits.
inline int streamk_key_blocks(SplitKVDeal deal, int seqlen_k, int block_n) {
  return deal == SplitKVDeal::kStreamK ? (seqlen_k + block_n - 1) / block_n : 0;
}

// One piece of CTA `cta`'s range, at its item `pos`: tile `tile`, blocks [first, end) of it, index `index` of the
// tile's `count` pieces (in item order). The piece runs to the tile's end or the CTA's, whichever comes first; the
// CTA's next piece starts at the next tile's first item (streamk_next).
struct StreamKPiece {
  int tile;
  int first;
  int end;
  int index;
  int count;
};
FLASHBUILD_STREAMK_HD StreamKPiece streamk_piece(int64_t items, int key_blocks, int grid, int cta, int64_t pos) {
  const int tile = int(pos / key_blocks);
  const int64_t tile0 = int64_t(tile) * key_blocks;
  const int64_t cta_end = streamk_start(items, grid, cta + 1);
  const int64_t end = cta_end < tile0 + key_blocks ? cta_end : tile0 + key_blocks;
  const int first_cta = streamk_cta_of(items, grid, tile0);
  const int last_cta = streamk_cta_of(items, grid, tile0 + key_blocks - 1);
  return {tile, int(pos - tile0), int(end - tile0), cta - first_cta, last_cta - first_cta + 1};
}
FLASHBUILD_STREAMK_HD int64_t streamk_next(int key_blocks, int64_t pos) { return (pos / key_blocks + 1) * key_blocks; }

}  // namespace flashbuild
