// Which query blocks each key-block CTA of the backward visits (the kernel's loop bounds), and, in
// deterministic mode (BwdParams::dq_semaphore set), the fixed order in which the CTAs that visit one
// query block add their dQ into it. Family-neutral (common/mask.h alone): the Ampere-path backward
// (ampere/bwd_kernel.h) and the Hopper backward (hopper/bwd_mainloop.h, bwd_epilogue.h) take the same turns.
//
// Why an order: every key-block CTA adds its share of each query block's dQ into dq_accum with fp32
// atomics. They land in whatever order the CTAs get there, and fp32 addition is not associative, so
// dQ's low bits change from run to run. In deterministic mode the CTAs of one query block take turns:
// a CTA waits until the block's counter equals its turn, adds, makes its adds visible, and increments
// the counter. The adds are still atomics (once serialized only their order matters).
//
// The turns come from the loop bounds themselves (queries() below, which the kernel's loop uses),
// never from a second formula: a CTA whose turn never comes spins forever. Both bounds are
// nondecreasing in the key block (common/mask.h), so the key blocks that visit query block m are those
// whose first query block is <= m (a prefix) and whose end is > m (a suffix): one contiguous range,
// found by binary search over queries(). tests/test_bwd_dq_order.py checks this on the CPU against a
// brute-force walk of the loop over many shapes, masks and tiles, and simulates the waits.
//
// Why it cannot deadlock: a CTA only ever waits for CTAs of its own (head, batch) slice with a lower
// blockIdx.x. The grid is (key blocks, nheads, batch), and CUDA hands out CTAs in linear order, x
// fastest (x + gridDim.x * (y + gridDim.y * z)); that is not a documented guarantee, but it is what
// the hardware does and what CUTLASS's serial split-K and FlashAttention-3's deterministic backward
// rely on in the same way. So whatever a CTA waits for was dispatched before it: the lowest unfinished
// CTA of the grid waits on finished CTAs only and finishes, then the next, and so on, however few SMs
// there are. The order in CTA terms is therefore always "lower blockIdx.x first"; which key block a
// CTA takes is free, and is chosen per mask:
//  - no right edge (neither causal nor local): every key block walks the query blocks from 0, all CTAs
//    start together, and CTA x takes key block x (ascending);
//  - a right edge (causal, local): key block n starts at its diagonal, query block m_block_min(n), and
//    later key blocks start further down. In ascending order the last key block could add to the last
//    query block only after key block 0 had walked all of them, so the CTAs near the diagonal would
//    idle for most of the kernel. Instead CTA x takes key block n_blocks - 1 - x: the last key blocks,
//    which reach each query block first (after the fewest steps), add first (descending; the order
//    FlashAttention-3 uses for causal). The Hopper kernel counts from the grid's last CTA instead
//    (gridDim.x - 1 - x, no sequence length in the consumers' registers): for a packed call's shorter
//    sequence the idle CTAs are then its first ones, and its key blocks keep the same order.
#pragma once

#include "common/mask.h"
#include "common/params.h"  // BwdParams::dq_semaphore, dq_semaphore_blocks

namespace flashbuild {

struct BlockRange {
  int begin;  // [begin, end); empty when begin >= end
  int end;
};

// The first i in [lo, hi) with pred(i), or hi; pred must be false then true over [lo, hi).
template <class Pred>
CUTE_HOST_DEVICE int first_true(int lo, int hi, Pred pred) {
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (pred(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

template <class Mask, int kBlockM, int kBlockN>
struct BwdBlocks {
  Mask mask;
  int n_blocks;  // key blocks of this sequence: ceil(seqlen_k / kBlockN)

  static constexpr bool kDescending = Mask::kHasRightEdge;

  // The query blocks key block n_block visits, in this order: the kernel's loop bounds.
  CUTE_HOST_DEVICE BlockRange queries(int n_block) const {
    return {mask.m_block_min(n_block, kBlockM, kBlockN), mask.m_block_max(n_block, kBlockM, kBlockN)};
  }

  // The key block CTA `cta` (blockIdx.x < n_blocks) takes. Only ordered calls reverse it: the default
  // keeps key block 0, the one that visits the most query blocks under a causal mask, first.
  CUTE_HOST_DEVICE int n_block_of(int cta, bool ordered) const {
    return kDescending && ordered ? n_blocks - 1 - cta : cta;
  }

  // The key blocks that visit query block m_block.
  CUTE_HOST_DEVICE BlockRange keys(int m_block) const {
    const int start_after = first_true(0, n_blocks, [&](int n) { return queries(n).begin > m_block; });
    const int end_after = first_true(0, n_blocks, [&](int n) { return queries(n).end > m_block; });
    return {end_after, start_after};
  }

  // Key block n_block's turn (0 adds first) at query block m_block, which it visits: its rank among
  // keys(m_block) in CTA order. Searches only the side it needs: O(log n_blocks) bound evaluations.
  CUTE_HOST_DEVICE int turn(int n_block, int m_block) const {
    if constexpr (kDescending) {
      return first_true(n_block + 1, n_blocks, [&](int n) { return queries(n).begin > m_block; }) - 1 - n_block;
    } else {
      return n_block - first_true(0, n_block, [&](int n) { return queries(n).end > m_block; });
    }
  }
};

// Query block m_block's counter of (batch, head): BwdParams::dq_semaphore's layout (params.h). Index: int,
// or blockIdx's unsigned as the Ampere kernel passes it (its SASS as before the helper).
template <class Index>
CUTE_HOST_DEVICE int* dq_counter(BwdParams const& p, Index batch, Index head, int m_block) {
  return p.dq_semaphore + (int64_t(batch) * p.nheads + head) * dq_semaphore_blocks(p.seqlen_q) + m_block;
}

// The turn's two halves, for one thread: spin until the counter reaches `turn` (acquire: the earlier
// turns' adds, released below, are then visible), and hand the block on (release: this thread's view
// of the adds goes with the increment). Both families call them; who else waits or fences around them
// is each kernel's business (the Ampere kernel's whole CTA below, the Hopper kernel's consumers or its
// dQ writer: hopper/bwd_epilogue.h).
CUTE_DEVICE void spin_until_turn(int const* counter, int turn) {
  int seen;
  do {
    asm volatile("ld.global.acquire.gpu.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
  } while (seen != turn);
}
CUTE_DEVICE void release_turn(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}

// Thread 0 spins until the counter reaches `turn`; the barrier then orders every thread's adds after
// the earlier turns' (their release, below, synchronizes with this acquire).
CUTE_DEVICE void wait_for_turn(int const* counter, int turn, int tidx) {
  if (tidx == 0) { spin_until_turn(counter, turn); }
  __syncthreads();
}

// Hands the query block to the next turn: every thread's adds are performed at GPU scope (fence)
// before the barrier, and thread 0 increments the counter with release semantics after it.
CUTE_DEVICE void pass_turn(int* counter, int tidx) {
  __threadfence();
  __syncthreads();
  if (tidx == 0) { release_turn(counter); }
}

}  // namespace flashbuild
