// The Hopper split-KV's persistent scheduler (kernels/hopper/tile_scheduler.h, SplitTileScheduler) walked on the host,
// the kernels' loop over each CTA (first_tile, valid, next_tile, decode: their _at forms). Prints
// "<cases> cases, <n> fail" last; tests/test_splitkv_deal_walk.py compiles and runs it.
//   every (query block, head, batch, split) once, its coordinates in range; each tile's splits = num_splits;
//   grid_size = min(tiles x num_splits, slots), every CTA a tile.
#include <cstdio>
#include <map>
#include <tuple>

#include "hopper/tile_scheduler.h"
#include "check.h"  // CHECK, fails

using namespace flashbuild;
using namespace flashbuild::hopper;

static void walk_splits(int seqlen_q, int nheads, int batch, int splits, int slots) {
  const SplitTileScheduler s = SplitTileScheduler::make({seqlen_q, 64, nheads, batch, splits, slots, 0, 1});
  const int grid = s.grid_size(slots);
  const int m_blocks = (seqlen_q + 63) / 64;
  const int work = m_blocks * nheads * batch * splits;
  CHECK(grid == (work < slots ? work : slots), "grid %d for %d tiles on %d slots", grid, work, slots);
  std::map<std::tuple<int, int, int, int>, int> seen;
  for (int cta = 0; cta < grid; ++cta) {
    int count = 0;
    for (int t = s.first_tile_at(cta); s.valid_at(t, cta); t = s.next_tile_at(t, grid)) {
      const TileCoord c = s.decode_at(t, cta);
      CHECK(c.splits == splits, "splits %d of %d", c.splits, splits);
      CHECK(c.m_block >= 0 && c.m_block < m_blocks && c.head >= 0 && c.head < nheads && c.batch >= 0 &&
                c.batch < batch && c.split >= 0 && c.split < splits,
            "coords %d %d %d split %d", c.m_block, c.head, c.batch, c.split);
      ++count;
      ++seen[{c.batch, c.head, c.m_block, c.split}];
    }
    CHECK(count > 0, "CTA %d of %d has no tile", cta, grid);
  }
  CHECK(int(seen.size()) == work, "splits deal: %zu tiles", seen.size());
  for (auto const& kv : seen) { CHECK(kv.second == 1, "splits deal: a tile dealt %d times", kv.second); }
}

int main() {
  int cases = 0;
  const int slots_list[] = {264, 132, 8, 1};
  const int nheads_list[] = {1, 8, 3};
  const int batch_list[] = {1, 2, 8, 64, 5};
  const int seqlen_q_list[] = {1, 4, 64, 65, 200};
  for (int slots : slots_list) {
    for (int nheads : nheads_list) {
      for (int batch : batch_list) {
        for (int seqlen_q : seqlen_q_list) {
          for (int splits : {1, 2, 7, 32}) {
            walk_splits(seqlen_q, nheads, batch, splits, slots);
            ++cases;
          }
        }
      }
    }
  }
  std::printf("%d cases, %d fail\n", cases, fails);
  return fails != 0;
}
