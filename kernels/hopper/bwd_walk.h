// The order in which a Hopper backward CTA walks its query blocks (bwd_mainloop.h, kStagger, says where and what it
// measured): in one place for the producer warp (bwd_producer.h), the consumers (bwd_mainloop.h), the dQ writer
// (bwd_epilogue.h) and the host walk that checks it (tests/host/bwd_walk.cu).
#pragma once

#include <cstdint>

#include <cute/config.hpp>

namespace flashbuild::hopper {

// Query blocks [m_block_min, m_block_max) walked from m_first, wrapping around past the last: step `iter` takes block
// at(iter), and iter_of gives a block's step. The plain order has m_first == m_block_min; the kernels that never
// stagger walk it with their plain loops (iter_of<false>: m_block - m_block_min).
struct BwdWalk {
  int m_block_min;
  int m_block_max;
  int m_first;

  // Key block n_block of a sequence's n_blocks starts n_block / n_blocks of the way in (none past the last).
  CUTE_HOST_DEVICE void stagger(int n_block, int n_blocks) {
    if (n_block < n_blocks) {
      m_first = m_block_min + int(int64_t(n_block) * (m_block_max - m_block_min) / n_blocks);
    }
  }
  CUTE_HOST_DEVICE int at(int iter) const {
    const int m = m_first + iter;
    return m < m_block_max ? m : m - (m_block_max - m_block_min);
  }
  template <bool kWraps>
  CUTE_HOST_DEVICE int iter_of(int m_block) const {
    if constexpr (kWraps) {
      const int i = m_block - m_first;
      return i >= 0 ? i : i + (m_block_max - m_block_min);
    } else {
      return m_block - m_block_min;
    }
  }
};

}  // namespace flashbuild::hopper
