// Which scores a query block may see: keys past seqlen_k never, and with causal attention only
// keys j <= i + seqlen_k - seqlen_q (the mask is aligned to the bottom-right corner, as flash-attn
// >= 2.1 does, so a decoding step with one query sees the whole cache).
#pragma once

#include "ampere/utils.h"

namespace flashbuild::ampere {

template <bool kIsCausal>
struct AttentionMask {
  int seqlen_q;
  int seqlen_k;

  // Key blocks [0, n_block_max) hold every key some row of this query block may see.
  CUTE_DEVICE int n_block_max(int m_block, int block_m, int block_n) const {
    int keys = seqlen_k;
    if constexpr (kIsCausal) {
      const int last_row = min((m_block + 1) * block_m, seqlen_q);
      keys = min(keys, last_row + seqlen_k - seqlen_q);
    }
    return keys <= 0 ? 0 : (keys + block_n - 1) / block_n;
  }

  // Query blocks [m_block_min, ..) hold every row that may see some key of key block n_block.
  CUTE_DEVICE int m_block_min(int n_block, int block_m, int block_n) const {
    if constexpr (!kIsCausal) { return 0; }
    const int first_row = n_block * block_n - (seqlen_k - seqlen_q);
    return first_row <= 0 ? 0 : first_row / block_m;
  }

  // Only the blocks that cross the seqlen_k edge or the causal diagonal need element-wise masking.
  CUTE_DEVICE bool needs_mask(int m_block, int n_block, int block_m, int block_n) const {
    const int last_col = (n_block + 1) * block_n - 1;
    bool crosses = last_col >= seqlen_k;
    if constexpr (kIsCausal) { crosses |= last_col > m_block * block_m + seqlen_k - seqlen_q; }
    return crosses;
  }

  // acc_s and coord are partitions of the same (block_m, block_n) tile; coord holds each
  // element's (row, col) inside the tile.
  template <class Acc, class Coord>
  CUTE_DEVICE void apply(Acc& acc_s, Coord const& coord, int row0, int col0) const {
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) {
      const int row = row0 + get<0>(coord(i));
      const int col = col0 + get<1>(coord(i));
      bool masked = col >= seqlen_k;
      if constexpr (kIsCausal) { masked |= col > row + seqlen_k - seqlen_q; }
      if (masked) { acc_s(i) = -INFINITY; }
    }
  }
};

}  // namespace flashbuild::ampere
