// The causal Hopper backward's grid in sections of heads (kernels/hopper/bwd_sections.h) walked on the host, in the
// order the hardware starts CTAs (linear index, x fastest). Prints "<cases> cases, <n> fail" last;
// tests/test_bwd_sections.py compiles and runs it. For each (key blocks, heads, batch, section):
//   the shift is the largest power of two up to the section that divides the heads;
//   every (key block, head, batch) is one CTA's, each in range;
//   a section's 2^shift heads of one batch are consecutive in the grid, key block 0 of each first, then key block 1;
//   shift 0 is the grid's own order (x the key block, y the head).
#include <cstdio>
#include <vector>

#include "hopper/bwd_sections.h"
#include "check.h"  // CHECK, fails

using namespace flashbuild::hopper;

static void walk(int n_blocks, int nheads, int batch, int section) {
  const int shift = bwd_section_shift(section, nheads), width = 1 << shift;
  CHECK(width <= (section > 1 ? section : 1) && nheads % width == 0, "shift %d for %d heads, section %d", shift,
        nheads, section);
  CHECK(2 * width > section || nheads % (2 * width) != 0, "shift %d not the largest for %d heads, section %d", shift,
        nheads, section);
  const BwdSectionGrid g = bwd_section_grid(n_blocks, nheads, batch, shift);
  CHECK(long(g.x) * g.y * g.z == long(n_blocks) * nheads * batch, "grid %u x %u x %u", g.x, g.y, g.z);
  std::vector<int> seen(size_t(n_blocks) * nheads * batch, 0);
  long linear = 0;
  for (unsigned z = 0; z < g.z; ++z) {
    for (unsigned y = 0; y < g.y; ++y) {
      for (unsigned x = 0; x < g.x; ++x, ++linear) {
        const BwdSectionCta c = bwd_section_cta(int(x), int(y), shift);
        const int b = int(z);
        const bool in_range = c.n_block >= 0 && c.n_block < n_blocks && c.head >= 0 && c.head < nheads;
        CHECK(in_range, "CTA (%u, %u, %u) -> key block %d, head %d", x, y, z, c.n_block, c.head);
        if (!in_range) { continue; }
        ++seen[(size_t(b) * nheads + c.head) * n_blocks + c.n_block];
        // The section's place: its first CTA is (batch, first head of the section) at key block 0.
        const long section_first = (long(b) * nheads + (c.head & ~(width - 1))) * n_blocks;
        const long expected = section_first + long(c.n_block) * width + (c.head & (width - 1));
        CHECK(linear == expected, "%d blocks, %d heads, section %d: CTA %ld is key block %d of head %d, batch %d",
              n_blocks, nheads, section, linear, c.n_block, c.head, b);
        if (shift == 0) { CHECK(c.n_block == int(x) && c.head == int(y), "own order: (%u, %u)", x, y); }
      }
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    CHECK(seen[i] == 1, "%d blocks, %d heads, batch %d, section %d: CTA %zu taken %d times", n_blocks, nheads, batch,
          section, i, seen[i]);
  }
}

int main() {
  int cases = 0;
  for (int section : {0, 1, 2, 4, 8, 16}) {
    for (int nheads = 1; nheads <= 70; ++nheads) {
      for (int n_blocks : {1, 2, 3, 7, 32, 129}) {
        for (int batch : {1, 3}) {
          walk(n_blocks, nheads, batch, section);
          ++cases;
        }
      }
    }
  }
  std::printf("%d cases, %d fail\n", cases, fails);
  return fails != 0;
}
