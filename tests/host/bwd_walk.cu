// The Hopper backward's walk over a CTA's query blocks (kernels/hopper/bwd_walk.h) on the host. Prints
// "<cases> cases, <n> fail" last; tests/test_bwd_walk.py compiles and runs it. For each (first block, blocks, key
// blocks):
//   the plain walk (m_first = m_block_min) takes the blocks in order;
//   every key block's staggered walk starts inside the range, takes each block exactly once, and iter_of inverts it;
//   key block 0 starts at the first block, and the starts never go back as the key block grows;
//   when there are at least as many query blocks as key blocks, no two key blocks start at the same block;
//   a key block past the sequence's (a packed call's grid covers the longest) keeps the plain start.
#include <cstdio>
#include <vector>

#include "hopper/bwd_walk.h"
#include "check.h"  // CHECK, fails

using namespace flashbuild::hopper;

static void walk(int m_min, int blocks, int n_blocks) {
  const int m_max = m_min + blocks;
  BwdWalk plain{m_min, m_max, m_min};
  for (int i = 0; i < blocks; ++i) {
    CHECK(plain.at(i) == m_min + i, "plain [%d, %d): step %d takes %d", m_min, m_max, i, plain.at(i));
    CHECK(plain.iter_of<true>(m_min + i) == i && plain.iter_of<false>(m_min + i) == i, "plain iter_of %d", i);
  }
  int previous = m_min;
  std::vector<int> starts;
  for (int n = 0; n < n_blocks + 2; ++n) {
    BwdWalk w{m_min, m_max, m_min};
    w.stagger(n, n_blocks);
    if (n >= n_blocks) {
      CHECK(w.m_first == m_min, "key block %d of %d moved its start to %d", n, n_blocks, w.m_first);
      continue;
    }
    CHECK(blocks == 0 || (w.m_first >= m_min && w.m_first < m_max), "[%d, %d), key block %d of %d: start %d", m_min,
          m_max, n, n_blocks, w.m_first);
    CHECK(n != 0 || w.m_first == m_min, "key block 0 starts at %d, not %d", w.m_first, m_min);
    CHECK(w.m_first >= previous, "[%d, %d): key block %d of %d starts at %d, before %d", m_min, m_max, n, n_blocks,
          w.m_first, previous);
    previous = w.m_first;
    starts.push_back(w.m_first);
    std::vector<int> seen(size_t(blocks), 0);
    for (int i = 0; i < blocks; ++i) {
      const int m = w.at(i);
      const bool in_range = m >= m_min && m < m_max;
      CHECK(in_range, "[%d, %d) from %d: step %d takes %d", m_min, m_max, w.m_first, i, m);
      if (!in_range) { continue; }
      ++seen[size_t(m - m_min)];
      CHECK(w.iter_of<true>(m) == i, "[%d, %d) from %d: iter_of(%d) = %d, not %d", m_min, m_max, w.m_first, m,
            w.iter_of<true>(m), i);
    }
    CHECK(blocks == 0 || w.at(0) == w.m_first, "the walk from %d starts at %d", w.m_first, w.at(0));
    for (int b = 0; b < blocks; ++b) {
      CHECK(seen[size_t(b)] == 1, "[%d, %d) from %d: block %d taken %d times", m_min, m_max, w.m_first, m_min + b,
            seen[size_t(b)]);
    }
  }
  if (blocks >= n_blocks) {
    for (size_t i = 1; i < starts.size(); ++i) {
      CHECK(starts[i] != starts[i - 1], "%d query blocks, %d key blocks: key blocks %zu and %zu both start at %d",
            blocks, n_blocks, i - 1, i, starts[i]);
    }
  }
}

int main() {
  int cases = 0;
  for (int m_min : {0, 3}) {
    for (int blocks = 0; blocks <= 70; ++blocks) {
      for (int n_blocks : {1, 2, 3, 7, 32, 64, 65, 129, 1024}) {
        walk(m_min, blocks, n_blocks);
        ++cases;
      }
    }
  }
  // Long sequences (2^31 keys in 64-key blocks: 2^25 key and query blocks), where n_block times the blocks passes
  // int32: with as many query blocks as key blocks, key block n starts at block n.
  for (int n : {1, 12345, (1 << 24) + 7, (1 << 25) - 1}) {
    BwdWalk w{0, 1 << 25, 0};
    w.stagger(n, 1 << 25);
    CHECK(w.m_first == n, "2^25 blocks: key block %d starts at %d", n, w.m_first);
    CHECK(w.at((1 << 25) - 1) == n - 1 && w.iter_of<true>(0) == (1 << 25) - n, "2^25 blocks from %d", n);
    ++cases;
  }
  std::printf("%d cases, %d fail\n", cases, fails);
  return fails != 0;
}
