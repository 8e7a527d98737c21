// The causal Hopper backward's grid in sections of heads (bwd_params.h, bwd_lpt_section, says why and what it
// measured): the launch's extents and each CTA's key block and head, in one place for the launch (bwd_launch.h), the
// kernel (bwd_kernel.h) and the host walk that checks them (tests/host/bwd_sections.cu).
#pragma once

#include <cute/config.hpp>

namespace flashbuild::hopper {

// log2 of the heads one section interleaves: the largest power of two up to `section` that divides nheads (so that
// no CTA of the grid is empty); 0, the grid's own order, for section <= 1 or odd nheads.
CUTE_HOST_DEVICE constexpr int bwd_section_shift(int section, int nheads) {
  int shift = 0;
  while ((2 << shift) <= section && nheads % (2 << shift) == 0) { ++shift; }
  return shift;
}

// The launch's extents, (key blocks x 2^shift, nheads / 2^shift, batch): the hardware starts CTAs in the order of their
// linear index, x fastest, so a section's heads take key block 0 first, then key block 1, and so on.
struct BwdSectionGrid {
  unsigned x, y, z;
};
inline BwdSectionGrid bwd_section_grid(int n_blocks, int nheads, int batch, int shift) {
  return {unsigned(n_blocks) << shift, unsigned(nheads) >> shift, unsigned(batch)};
}

// CTA (x, y)'s key block and head in that grid (its batch is z); shift 0: (x, y), the grid's own order.
struct BwdSectionCta {
  int n_block, head;
};
CUTE_HOST_DEVICE BwdSectionCta bwd_section_cta(int x, int y, int shift) {
  return {x >> shift, (y << shift) | (x & ((1 << shift) - 1))};
}

}  // namespace flashbuild::hopper
