// Which scores a query block may see: keys past seqlen_k never; with causal attention only keys
// j <= i + seqlen_k - seqlen_q (aligned to the bottom-right corner, as flash-attn >= 2.1 does, so
// a decoding step with one query sees the whole cache); with local attention only keys in
// [i + seqlen_k - seqlen_q - window_left, i + seqlen_k - seqlen_q + window_right]. A local kernel
// ignores kIsCausal: the binding gives a causal call window_right = 0.
// The query-block range of a key block (m_block_min/max, and the key edges they use) is host-callable
// too: the deterministic backward orders its dQ adds by it (common/bwd_dq_order.h), and a host test
// (tests/test_bwd_dq_order.py) checks that order against the loop bounds on the CPU.
#pragma once

#include <cute/tensor.hpp>

namespace flashbuild {

template <bool kIsCausal, bool kIsLocal = false>
struct AttentionMask {
  int seqlen_q;
  int seqlen_k;
  int window_left = 0;   // read only when kIsLocal
  int window_right = 0;

  static constexpr bool kHasRightEdge = kIsCausal || kIsLocal;

  // The last key row `row` may see (before the seqlen_k edge), and the first.
  CUTE_HOST_DEVICE int last_key(int row) const {
    return row + seqlen_k - seqlen_q + (kIsLocal ? window_right : 0);
  }
  CUTE_HOST_DEVICE int first_key(int row) const { return row + seqlen_k - seqlen_q - window_left; }

  // Key blocks [n_block_min, n_block_max) hold every key some row of this query block may see.
  CUTE_DEVICE int n_block_max(int m_block, int block_m, int block_n) const {
    int keys = seqlen_k;
    if constexpr (kHasRightEdge) {
      const int last_row = min((m_block + 1) * block_m, seqlen_q) - 1;
      keys = min(keys, last_key(last_row) + 1);
    }
    return keys <= 0 ? 0 : (keys + block_n - 1) / block_n;
  }
  CUTE_DEVICE int n_block_min(int m_block, int block_m, int block_n) const {
    if constexpr (!kIsLocal) { return 0; }
    const int first = first_key(m_block * block_m);
    return first <= 0 ? 0 : first / block_n;
  }

  // Query blocks [m_block_min, m_block_max) hold every row that may see some key of key block n_block.
  CUTE_HOST_DEVICE int m_block_min(int n_block, int block_m, int block_n) const {
    if constexpr (!kHasRightEdge) { return 0; }
    // The first row whose last key reaches this block's first key.
    const int first_row = n_block * block_n - last_key(0);
    return first_row <= 0 ? 0 : first_row / block_m;
  }
  CUTE_HOST_DEVICE int m_block_max(int n_block, int block_m, int block_n) const {
    const int blocks = (seqlen_q + block_m - 1) / block_m;
    if constexpr (!kIsLocal) { return blocks; }
    // The last row whose first key is at most this block's last key.
    const int last_row = min(seqlen_k, (n_block + 1) * block_n) - 1 - first_key(0);
    return last_row < 0 ? 0 : min(blocks, last_row / block_m + 1);
  }

  // Only the blocks that cross the seqlen_k edge or a mask diagonal need element-wise masking.
  CUTE_DEVICE bool needs_mask(int m_block, int n_block, int block_m, int block_n) const {
    const int first_col = n_block * block_n;
    const int last_col = first_col + block_n - 1;
    bool crosses = last_col >= seqlen_k;
    if constexpr (kHasRightEdge) { crosses |= last_col > last_key(m_block * block_m); }
    if constexpr (kIsLocal) { crosses |= first_col < first_key((m_block + 1) * block_m - 1); }
    return crosses;
  }

  // acc_s and coord are partitions of the same (block_m, block_n) tile; coord holds each
  // element's (row, col) inside the tile.
  template <class Acc, class Coord>
  CUTE_DEVICE void apply(Acc& acc_s, Coord const& coord, int row0, int col0) const {
    CUTE_UNROLL
    for (int i = 0; i < cute::size(acc_s); ++i) {
      const int row = row0 + cute::get<0>(coord(i));
      const int col = col0 + cute::get<1>(coord(i));
      bool masked = col >= seqlen_k;
      if constexpr (kHasRightEdge) { masked |= col > last_key(row); }
      if constexpr (kIsLocal) { masked |= col < first_key(row); }
      if (masked) { acc_s(i) = -INFINITY; }
    }
  }
};

// A Hopper step's mask as a type, so that each call site of a step compiles only the mask code it needs:
// std::true_type (mask every element), std::false_type (no mask code), or MaskByBlock (needs_mask decides at run
// time, per block). mask_step runs `apply` as `masked` says; `needs` is the block's needs_mask test.
struct MaskByBlock {};

template <class Masked, class Needs, class Apply>
CUTE_DEVICE void mask_step(Masked, Needs&& needs, Apply&& apply) {
  if constexpr (std::is_same_v<Masked, MaskByBlock>) {
    if (needs()) { apply(); }
  } else if constexpr (Masked::value) {
    apply();
  }
}

}  // namespace flashbuild
