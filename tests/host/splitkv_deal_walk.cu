// The Hopper split-KV's persistent scheduler (kernels/hopper/tile_scheduler.h, SplitTileScheduler) walked on the host,
// the kernels' loop over each CTA (first_tile, valid, next_tile, decode: their _at forms), for both deals. Prints
// "<cases> cases, <n> fail" last; tests/test_splitkv_deal_walk.py compiles and runs it.
//   splits: every (query block, head, batch, split) once; each tile's splits = num_splits; no stream-K range.
//   stream-K: every (query block, head, batch)'s key blocks [0, key_blocks) once, in pieces indexed 0 .. count - 1 in
//   key order with one count, at most the deal's max_pieces (<= kStreamKMaxPieces), the last piece open-ended
//   (INT32_MAX);
//   grid_size = the deal's grid <= the slots, every CTA a piece; make refuses partials sized below max_pieces.
#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "hopper/tile_scheduler.h"

using namespace flashbuild;
using namespace flashbuild::hopper;

static int fails = 0;
#define CHECK(cond, ...)                                 \
  do {                                                   \
    if (!(cond)) {                                       \
      if (++fails <= 20) {                               \
        std::printf("FAIL %s: ", #cond);                 \
        std::printf(__VA_ARGS__);                        \
        std::printf("\n");                               \
      }                                                  \
    }                                                    \
  } while (0)

using Key = std::tuple<int, int, int>;  // (batch, head, m_block)

static void walk_splits(int seqlen_q, int nheads, int batch, int splits, int slots) {
  const SplitTileScheduler s = SplitTileScheduler::make({seqlen_q, 64, nheads, batch, splits, slots, 0, 1});
  const int grid = s.grid_size(slots);
  std::map<std::tuple<int, int, int, int>, int> seen;
  for (int cta = 0; cta < grid; ++cta) {
    for (int t = s.first_tile_at(cta); s.valid_at(t, cta); t = s.next_tile_at(t, grid)) {
      const TileCoord c = s.decode_at(t, cta);
      CHECK(c.splits == splits && c.n_end == 0, "splits %d n_end %d", c.splits, c.n_end);
      ++seen[{c.batch, c.head, c.m_block, c.split}];
    }
  }
  const int m_blocks = (seqlen_q + 63) / 64;
  CHECK(int(seen.size()) == m_blocks * nheads * batch * splits, "splits deal: %zu tiles", seen.size());
  for (auto const& kv : seen) { CHECK(kv.second == 1, "splits deal: a tile dealt %d times", kv.second); }
}

static void walk_streamk(int seqlen_q, int nheads, int batch, int key_blocks, int slots, int min_blocks) {
  const int m_blocks = (seqlen_q + 63) / 64, tiles = m_blocks * nheads * batch;
  const StreamKDeal d = streamk_deal(tiles, key_blocks, slots, min_blocks, kStreamKMaxPieces);
  if (d.max_pieces > 1) {  // partials one slot short: refused
    bool refused = false;
    try {
      SplitTileScheduler::make({seqlen_q, 64, nheads, batch, d.max_pieces - 1, slots, 0, 1, key_blocks, min_blocks});
    } catch (std::runtime_error const&) { refused = true; }
    CHECK(refused, "partials of %d slots for up to %d pieces taken", d.max_pieces - 1, d.max_pieces);
  }
  const SplitTileScheduler s =
      SplitTileScheduler::make({seqlen_q, 64, nheads, batch, d.max_pieces, slots, 0, 1, key_blocks, min_blocks});
  const int grid = s.grid_size(slots);
  CHECK(grid == d.grid && grid >= 1 && grid <= slots, "grid %d, deal %d, slots %d", grid, d.grid, slots);
  CHECK(d.max_pieces >= 1 && d.max_pieces <= kStreamKMaxPieces, "max_pieces %d", d.max_pieces);
  std::map<Key, std::vector<TileCoord>> pieces;
  for (int cta = 0; cta < grid; ++cta) {
    int count = 0;
    for (int t = s.first_tile_at(cta); s.valid_at(t, cta); t = s.next_tile_at(t, grid)) {
      const TileCoord c = s.decode_at(t, cta);
      CHECK(c.m_block >= 0 && c.m_block < m_blocks && c.head >= 0 && c.head < nheads && c.batch >= 0 &&
                c.batch < batch, "coords %d %d %d", c.m_block, c.head, c.batch);
      pieces[{c.batch, c.head, c.m_block}].push_back(c);
      ++count;
    }
    CHECK(count > 0, "CTA %d of %d has no piece", cta, grid);
  }
  CHECK(int(pieces.size()) == tiles, "stream-K: %zu of %d tiles", pieces.size(), tiles);
  for (auto& kv : pieces) {
    auto& v = kv.second;
    std::sort(v.begin(), v.end(), [](TileCoord const& a, TileCoord const& b) { return a.n_begin < b.n_begin; });
    int at = 0;
    for (int i = 0; i < int(v.size()); ++i) {
      const TileCoord& c = v[i];
      const bool last = i + 1 == int(v.size());
      const int end = last ? key_blocks : c.n_end;
      CHECK(c.n_begin == at && end > c.n_begin && c.split == i && c.splits == int(v.size()) &&
                c.splits <= d.max_pieces && (last ? c.n_end == INT32_MAX : c.n_end > 0 && c.n_end < key_blocks),
            "tile (%d %d %d) piece %d: [%d, %d) split %d of %d, max %d", std::get<0>(kv.first),
            std::get<1>(kv.first), std::get<2>(kv.first), i, c.n_begin, c.n_end, c.split, c.splits, d.max_pieces);
      at = end;
    }
    CHECK(at == key_blocks, "a tile's pieces end at %d of %d blocks", at, key_blocks);
  }
}

int main() {
  int cases = 0;
  const int slots_list[] = {264, 132, 8, 1};
  const int nheads_list[] = {1, 8, 3};
  const int batch_list[] = {1, 2, 8, 64, 5};
  const int seqlen_q_list[] = {1, 4, 64, 65, 200};
  const int blocks_list[] = {1, 2, 3, 32, 64, 257, 1024};
  for (int slots : slots_list) {
    for (int nheads : nheads_list) {
      for (int batch : batch_list) {
        for (int seqlen_q : seqlen_q_list) {
          for (int splits : {1, 2, 7}) {
            walk_splits(seqlen_q, nheads, batch, splits, slots);
            ++cases;
          }
          for (int blocks : blocks_list) {
            for (int min_blocks : {1, 2}) {
              walk_streamk(seqlen_q, nheads, batch, blocks, slots, min_blocks);
              ++cases;
            }
          }
        }
      }
    }
  }
  walk_streamk(1, 1, 1, 8192, 264, 1);  // one tile, many blocks: the piece bound holds at kStreamKMaxPieces
  walk_streamk(1, 8, 1024, 16384, 264, 2);  // 8192 tiles, 128M items
  cases += 2;
  std::printf("%d cases, %d fail\n", cases, fails);
  return fails != 0;
}
