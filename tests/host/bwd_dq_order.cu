// Host-only check of the deterministic backward's dQ order (kernels/common/bwd_dq_order.h) against a
// brute-force walk of the kernel's own loop bounds (BwdBlocks::queries, what bwd_kernel.h iterates),
// run by tests/test_bwd_dq_order.py. No device code runs: nvcc compiles it for the host.
//
// For every (seqlen_q, seqlen_k, tile, mask, window) below, and each query block m:
//   - the key blocks whose loop visits m form one contiguous range, and keys(m) is that range;
//   - turn(n, m) of each visitor is its rank in CTA order (blockIdx.x ascending): 0 .. count-1, no gap,
//     so every visit is counted and the counter ends at the count;
//   - every visit has a counter (m < dq_semaphore_blocks(seqlen_q));
//   - the default mapping is unchanged (CTA x takes key block x when not ordered).
// For the smaller shapes it also runs the waits: CTAs dispatched in blockIdx.x order onto 1, 2 or 5
// "SMs", each advancing through its query blocks only when the counter equals its turn, must all finish.
// Prints one summary line; every failure prints a line starting with FAIL, and the exit code is 1.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/bwd_dq_order.h"
#include "common/params.h"

using namespace flashbuild;

namespace {

long g_cases = 0, g_visits = 0, g_simulated = 0, g_failures = 0;

struct Config {
  int seqlen_q, seqlen_k, window_left, window_right;
  const char* mask;
  int block_m, block_n;
};

void fail(const Config& c, const char* what, int n, int m, long got, long want) {
  if (++g_failures <= 20) {
    std::printf("FAIL %s: seqlen_q %d seqlen_k %d mask %s window (%d, %d) tile %dx%d: key block %d query block %d: "
                "got %ld, want %ld\n", what, c.seqlen_q, c.seqlen_k, c.mask, c.window_left, c.window_right,
                c.block_m, c.block_n, n, m, got, want);
  }
}

// Runs the waits of one (head, batch) slice: CTAs 0 .. n_blocks-1 dispatched in order onto `sms` slots;
// a resident CTA adds to its next query block when that block's counter equals its turn.
template <class Blocks>
bool simulate(const Blocks& b, int m_blocks, int sms) {
  std::vector<int> counter(m_blocks, 0), next(b.n_blocks), cta_block(b.n_blocks);
  std::vector<int> resident;
  int dispatched = 0, finished = 0;
  for (int cta = 0; cta < b.n_blocks; ++cta) {
    cta_block[cta] = b.n_block_of(cta, true);
    next[cta] = b.queries(cta_block[cta]).begin;
  }
  while (finished < b.n_blocks) {
    while (int(resident.size()) < sms && dispatched < b.n_blocks) { resident.push_back(dispatched++); }
    bool progress = false;
    for (size_t i = 0; i < resident.size(); ++i) {
      const int cta = resident[i], n = cta_block[cta];
      const BlockRange visits = b.queries(n);
      if (next[cta] >= visits.end) {  // done: frees its slot
        resident.erase(resident.begin() + i);
        ++finished;
        progress = true;
        break;
      }
      const int m = next[cta];
      if (counter[m] == b.turn(n, m)) {
        ++counter[m];
        ++next[cta];
        progress = true;
      }
    }
    if (!progress) { return false; }
  }
  for (int m = 0; m < m_blocks; ++m) {
    const BlockRange keys = b.keys(m);
    if (counter[m] != (keys.end > keys.begin ? keys.end - keys.begin : 0)) { return false; }
  }
  return true;
}

template <bool kCausal, bool kLocal, int kBlockM, int kBlockN>
void check(int seqlen_q, int seqlen_k, int window_left, int window_right, const char* name, bool run_waits) {
  using Mask = AttentionMask<kCausal, kLocal>;
  const Mask mask{seqlen_q, seqlen_k, window_left, window_right};
  const int n_blocks = (seqlen_k + kBlockN - 1) / kBlockN;  // the kernel's CTAs of this sequence
  const BwdBlocks<Mask, kBlockM, kBlockN> b{mask, n_blocks};
  const Config c{seqlen_q, seqlen_k, window_left, window_right, name, kBlockM, kBlockN};
  const int m_blocks = (seqlen_q + kBlockM - 1) / kBlockM;
  ++g_cases;

  // Brute force: the visitors of every query block, in key-block order, from the loop bounds.
  std::vector<std::vector<int>> visitors(m_blocks);
  for (int n = 0; n < n_blocks; ++n) {
    if (b.n_block_of(n, false) != n) { fail(c, "default mapping", n, -1, b.n_block_of(n, false), n); }
    const BlockRange visits = b.queries(n);
    if (visits.begin != mask.m_block_min(n, kBlockM, kBlockN) || visits.end != mask.m_block_max(n, kBlockM, kBlockN)) {
      fail(c, "loop bounds", n, -1, visits.begin, mask.m_block_min(n, kBlockM, kBlockN));
    }
    for (int m = visits.begin; m < visits.end; ++m) {
      if (m < 0 || m >= m_blocks) {
        fail(c, "query block out of range", n, m, m, m_blocks);
        continue;
      }
      if (m >= dq_semaphore_blocks(seqlen_q)) { fail(c, "no counter", n, m, m, dq_semaphore_blocks(seqlen_q)); }
      visitors[m].push_back(n);
      ++g_visits;
    }
  }
  for (int m = 0; m < m_blocks; ++m) {
    const std::vector<int>& v = visitors[m];
    const BlockRange keys = b.keys(m);
    if (v.empty()) {
      if (keys.begin < keys.end) { fail(c, "keys of an unvisited block", -1, m, keys.end - keys.begin, 0); }
      continue;
    }
    const int lo = v.front(), hi = v.back();
    if (hi - lo + 1 != int(v.size())) { fail(c, "visitors not contiguous", lo, m, hi - lo + 1, long(v.size())); }
    if (keys.begin != lo || keys.end != hi + 1) { fail(c, "keys()", keys.begin, m, keys.end, hi + 1); }
    // CTA order: the CTA of key block n is n (ascending) or n_blocks - 1 - n (descending).
    for (int n : v) {
      const int cta = b.n_block_of(n, true) == n ? n : n_blocks - 1 - n;
      if (b.n_block_of(cta, true) != n) { fail(c, "CTA mapping", n, m, b.n_block_of(cta, true), n); }
      int rank = 0;
      for (int other : v) {
        const int other_cta = b.n_block_of(other, true) == other ? other : n_blocks - 1 - other;
        rank += other_cta < cta;
      }
      const int turn = b.turn(n, m);
      if (turn != rank) { fail(c, "turn", n, m, turn, rank); }
    }
  }
  if (run_waits) {
    for (int sms : {1, 2, 5}) {
      ++g_simulated;
      if (!simulate(b, m_blocks, sms) && ++g_failures <= 20) {
        std::printf("FAIL waits on %d SMs deadlock or miss a visit: seqlen_q %d seqlen_k %d mask %s window (%d, %d) "
                    "tile %dx%d\n", sms, seqlen_q, seqlen_k, name, window_left, window_right, kBlockM, kBlockN);
      }
    }
  }
}

template <int kBlockM, int kBlockN>
void check_tile(const std::vector<int>& seqlens) {
  for (int seqlen_q : seqlens) {
    for (int seqlen_k : seqlens) {
      const bool waits = seqlen_q <= 1100 && seqlen_k <= 1100;
      const int unbounded = seqlen_q + seqlen_k;  // the binding's value for an unbounded side
      check<false, false, kBlockM, kBlockN>(seqlen_q, seqlen_k, 0, 0, "none", waits);
      check<true, false, kBlockM, kBlockN>(seqlen_q, seqlen_k, 0, 0, "causal", waits);
      // Local kernels (kIsCausal ignored: the binding gives a causal call window_right = 0). A varlen
      // sequence shorter than the longest sees an "unbounded" side larger than its own lengths.
      for (int left : {0, 1, 17, 128, 1000, unbounded, 3 * unbounded + 5}) {
        for (int right : {0, 1, 64, 300, unbounded, 3 * unbounded + 5}) {
          check<false, true, kBlockM, kBlockN>(seqlen_q, seqlen_k, left, right, "local", waits);
          check<true, true, kBlockM, kBlockN>(seqlen_q, seqlen_k, left, right, "local+causal", waits);
        }
      }
    }
  }
}

}  // namespace

int main() {
  const std::vector<int> seqlens = {1, 2, 17, 31, 32, 33, 63, 64, 65, 113, 127, 128, 129, 255, 257, 1023, 4097};
  // The tiles bwd_tile gives (hdim <= 64: 128 x 128; 96/128: 64 x 128; 192/256: 64 x 64; sm86/sm89: 32 x 64,
  // 32 x 32) and two that only an override makes (-DFLASHBUILD_BWD_BLOCK_M/N).
  check_tile<128, 128>(seqlens);
  check_tile<64, 128>(seqlens);
  check_tile<64, 64>(seqlens);
  check_tile<32, 64>(seqlens);
  check_tile<32, 32>(seqlens);
  check_tile<128, 64>(seqlens);
  check_tile<32, 128>(seqlens);
  std::printf("checked %ld cases, %ld (key block, query block) visits, %ld wait simulations; %ld failures\n",
              g_cases, g_visits, g_simulated, g_failures);
  return g_failures == 0 ? 0 : 1;
}
