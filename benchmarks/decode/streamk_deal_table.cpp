// The stream-K deal (kernels/common/splitkv_streamk.h) of issue 45's table rows beside the splits deal's count
// (kernels/common/splitkv_heuristic.h, choose_num_splits_hopper), at 132 SMs (264 slots): arithmetic, no GPU.
//   g++ -std=c++17 -Ikernels benchmarks/decode/streamk_deal_table.cpp -o /tmp/deal && /tmp/deal
// Prints a markdown table: per row the splits deal's CTAs and the most key blocks one CTA walks, the stream-K deal's
// CTAs, most blocks a CTA and most pieces a tile, and the blocks a slot would take if the work were cut evenly.
// The deal was taken out of main after issue 45's run 14 (README.md, "A stream-K deal"): compile this in a tree of
// the last commit that has it, 3a46448 (`git worktree add /tmp/streamk 3a46448`); elsewhere the #error says so.
#include <cstdio>

#include "common/splitkv_heuristic.h"
#if !__has_include("common/splitkv_streamk.h")
#error "this tree has no stream-K deal (kernels/common/splitkv_streamk.h, taken out of main after issue 45's run 14): compile this in a tree of 3a46448, `git worktree add /tmp/streamk 3a46448`"
#endif
#include "common/splitkv_streamk.h"

using namespace flashbuild;

int main() {
  const int sms = 132, slots = sms * kHopperSplitKVCtasPerSm, kv_heads = 8, group = 4;  // 32 query heads on 8
  std::printf("| hdim | batch | cache | splits: CTAs, most blocks a CTA | stream-K: CTAs, most blocks a CTA, most "
              "pieces a tile | blocks a slot, even |\n| --- | --- | --- | --- | --- | --- |\n");
  for (int hd : {128, 64}) {
    for (int batch : {1, 8, 64}) {
      for (int cache : {4096, 16384, 65536}) {
        const int bn = hopper_splitkv_block_n(hd), blocks = (cache + bn - 1) / bn, tiles = batch * kv_heads;
        const int splits = choose_num_splits_hopper(batch, kv_heads, group, cache, hd, sms);
        const int per_split = (blocks + splits - 1) / splits, units = tiles * splits;
        const int grid = units < slots ? units : slots;
        int most = 0;  // CTA c walks units c, c + grid, ...; unit u is split u % splits of its tile
        for (int c = 0; c < grid; ++c) {
          int load = 0;
          for (int u = c; u < units; u += grid) {
            const int first = (u % splits) * per_split, end = first + per_split < blocks ? first + per_split : blocks;
            load += end > first ? end - first : 0;
          }
          most = load > most ? load : most;
        }
        const StreamKDeal d = streamk_deal(tiles, blocks, slots, streamk_min_blocks(bn), kStreamKMaxPieces);
        std::printf("| %d | %d | %dk | %d, %d | %d, %lld, %d | %.1f |\n", hd, batch, cache / 1024, grid, most, d.grid,
                    (long long)((d.items + d.grid - 1) / d.grid), d.max_pieces, double(d.items) / slots);
      }
    }
  }
  return 0;
}
