// Walks PersistentTileScheduler<true>'s deal on the host (kernels/hopper/tile_scheduler.h: make(), valid_at,
// decode_at), no GPU: every (batch, head, query block) is dealt exactly once, over query blocks a head 1-160,
// 1-600 (batch, head)s, grids of 1-132 CTAs (a small grid stands for a MIG slice) and the settings of
// FLASHBUILD_HOPPER_FWD_PAIRS (off, short, all; 1-3 pair rounds left to the tail); without pair rounds the deal
// is the plain longest-first order (the last query block of every (batch, head), then the one before, each round
// dealt forwards and backwards in turn), CTA by CTA; with pairs, the order they were measured with
// (measured_decode). Exit status 0 when every case holds. From the repository root:
//   nvcc -std=c++17 --expt-relaxed-constexpr -Ikernels -I<cutlass>/include -x cu \
//     benchmarks/fwd_tile_turnover/deal_check.cu -o /tmp/deal_check && /tmp/deal_check
// (<cutlass>: the CUTLASS the builds use, e.g. `python3 -c "import cutlass_library, os;
// print(os.path.dirname(cutlass_library.__file__))"`/source.)
#include <algorithm>
#include <climits>
#include <cstdio>
#include <vector>

#include "hopper/fwd_pairs.h"  // kPairMaxBlocks
#include "hopper/tile_scheduler.h"

using flashbuild::hopper::PersistentTileScheduler;
using flashbuild::hopper::TileCoord;
using Scheduler = PersistentTileScheduler<true>;

// The decode the pairs were measured with (2cb81e5, README.md "Measured"), recomputing the tail's layout per
// tile: the deal must be the same wherever it was defined. It was not when the tail began inside the pairs
// of the last (batch, head) (j0 > 0, h0 = heads - 1): its outer levels have no heads, and it dealt tiles of a
// (batch, head) past the call there (false).
static long measured_undefined = 0;
static bool measured_decode(const Scheduler& s, int tile, int cta, int grid, TileCoord& out) {
  const int m_blocks = s.num_m_blocks, pairs = m_blocks / 2, hbs = s.num_tiles / m_blocks, nheads = s.nheads;
  auto coord = [&](int m, int hb) { return TileCoord{m, hb % nheads, hb / nheads}; };
  if (tile < 2 * s.pair_rounds) {
    const int u = (tile / 2) * grid + cta, j = u % pairs;
    out = coord((tile & 1) ? j : m_blocks - 1 - j, u / pairs);
    return true;
  }
  const int units = s.pair_rounds * grid;
  const int h0 = units / std::max(pairs, 1), j0 = units % std::max(pairs, 1);
  const int rest = hbs - h0, outer = std::max(rest - 1, 1);
  if (j0 > 0 && rest == 1) { return false; }
  const int round = tile - 2 * s.pair_rounds;
  int q = round * grid + ((round & 1) ? grid - 1 - cta : cta);
  if (q < j0 * outer) { return out = coord(m_blocks - 1 - q / outer, h0 + 1 + q % outer), true; }
  q -= j0 * outer;
  const bool odd = m_blocks & 1;
  const int above = m_blocks - 1 - j0 - pairs + (odd ? 0 : 1);
  if (q < above * rest) { return out = coord(m_blocks - 1 - j0 - q / rest, h0 + q % rest), true; }
  q -= above * rest;
  if (odd) {
    if (q < hbs) { return out = coord(pairs, q), true; }
    q -= hbs;
  }
  const int below = pairs - j0;
  if (q < below * rest) { return out = coord(pairs - 1 - q / rest, h0 + q % rest), true; }
  q -= below * rest;
  return out = coord(j0 - 1 - q / outer, h0 + 1 + q % outer), true;
}

static long cases = 0, paired_cases = 0;

// nullptr when the deal holds, else what failed.
static const char* check(int m_blocks, int nheads, int batch, int sms, int pair_max, int tail_rounds) {
  const int block_m = 128, seqlen_q = m_blocks * block_m - 5;  // a part block, as the kernel's bottom alignment
  const Scheduler s = Scheduler::make({seqlen_q, block_m, nheads, batch, 1, sms, pair_max, tail_rounds});
  const int grid = s.grid_size(sms), hbs = nheads * batch;
  if (s.num_tiles != m_blocks * hbs) { return "num_tiles"; }
  if (s.tail_tiles != s.num_tiles - 2 * s.pair_rounds * grid) { return "tail_tiles is not what the pairs left"; }
  std::vector<int> seen(size_t(s.num_tiles), 0);
  for (int cta = 0; cta < grid; ++cta) {
    for (int step = 0; s.valid_at(step, cta, grid); ++step) {
      const TileCoord t = s.decode_at(step, cta, grid);
      if (t.m_block < 0 || t.m_block >= m_blocks || t.head < 0 || t.head >= nheads || t.batch < 0 || t.batch >= batch) {
        return "a tile outside the call";
      }
      if (s.pair_rounds == 0) {  // the plain longest-first order: tile i of the CTA's walk
        const int round = step, i = round * grid + ((round & 1) ? grid - 1 - cta : cta);
        const int hb = i % hbs;
        if (t.m_block != m_blocks - 1 - i / hbs || t.head != hb % nheads || t.batch != hb / nheads) {
          return "without pairs, not the longest-first order";
        }
      }
      TileCoord was;
      if (!measured_decode(s, step, cta, grid, was)) {
        ++measured_undefined;
      } else if (was.m_block != t.m_block || was.head != t.head || was.batch != t.batch) {
        return "not the order the pairs were measured with";
      }
      if (step > 2 * m_blocks * hbs) { return "a CTA walks past every tile"; }
      ++seen[size_t((t.batch * nheads + t.head) * m_blocks + t.m_block)];
    }
  }
  for (int c : seen) {
    if (c != 1) { return c == 0 ? "a tile never dealt" : "a tile dealt twice"; }
  }
  ++cases, paired_cases += s.pair_rounds > 0;
  return nullptr;
}

int main() {
  const int pair_bounds[] = {0, flashbuild::hopper::kPairMaxBlocks, INT_MAX};
  const int grids[] = {1, 2, 3, 7, 16, 60, 78, 114, 132};
  const int heads[] = {1, 2, 3, 5, 8, 16, 40};
  const int batches[] = {1, 2, 3, 4, 15};
  int failed = 0;
  for (int m_blocks = 1; m_blocks <= 160; m_blocks += m_blocks < 40 ? 1 : 7) {
    for (int nheads : heads) {
      for (int batch : batches) {
        for (int sms : grids) {
          for (int pair_max : pair_bounds) {
            for (int tail_rounds = 1; tail_rounds <= (pair_max ? 3 : 1); ++tail_rounds) {
              if (const char* why = check(m_blocks, nheads, batch, sms, pair_max, tail_rounds)) {
                if (failed++ < 20) {
                  std::printf("FAIL M %d nheads %d batch %d sms %d pair_max %d tail rounds %d: %s\n", m_blocks,
                              nheads, batch, sms, pair_max, tail_rounds, why);
                }
              }
            }
          }
        }
      }
    }
  }
  std::printf("%ld deals hold (%ld with pair rounds), %d fail; %ld tiles where the measured decode was undefined\n",
              cases, paired_cases, failed, measured_undefined);
  return failed ? 1 : 0;
}
