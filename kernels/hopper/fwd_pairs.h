// FLASHBUILD_HOPPER_FWD_PAIRS, the setting of the Hopper forward's causal scheduler (tile_scheduler.h) that the
// launcher (fwd_launch.h) reads at every launch. Host code alone, no CUDA or CuTe: tests/fuzz compiles it with the
// host compiler and feeds it arbitrary values.
#pragma once

#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/env_value.h"

namespace flashbuild::hopper {

// FLASHBUILD_HOPPER_FWD_PAIRS=short pairs only up to this many query blocks a head (4k at 128-row tiles, 6k at
// hdim 64's 192 rows); so did the default up to e99fd6a. Timed in turns, one call of each setting a round (flashbuild
// bench's protocol), `all` won at 4k (1.091x, 1.034x, 1.015x at hdim 64 / 128 / 256) and lost at 16k (0.989x,
// 0.997x, 0.997x: the static deal of pairs evens the CTAs out less well than longest first, balance.py)
// (benchmarks/checks/merged-5). But calls in turns share one clock, and the card runs at its power limit: what the
// turns leave out is the energy a call takes. Each setting timed alone for 1.2-1.5 s (benchmarks/fwd_clock_power/),
// pairs past this bound with two rounds left to the tail (`all:2`) read about a quarter of the DRAM bytes at 16k and
// run at a higher clock: 1.012-1.066x at 8k, 1.002-1.038x at 16k (h200-4, hdim 256 to 64), in turns 0.994-1.004x.
// Up to the bound two tail rounds lose (1k: 0.95-0.97x at hdim 128-256, h200-5), so the default leaves one there.
#ifdef FLASHBUILD_HOPPER_FWD_PAIR_MAX_BLOCKS
constexpr int kPairMaxBlocks = FLASHBUILD_HOPPER_FWD_PAIR_MAX_BLOCKS;  // sweeps; 0: longest first alone
#else
constexpr int kPairMaxBlocks = 32;
#endif

// Pairs of causal query blocks (tile_scheduler.h: a head's query blocks m and M - 1 - m on neighbouring CTAs
// before a longest-first tail, so its K/V is read about once instead of once per ~2 rounds of other heads) up to
// how many query blocks a head, and how many whole rounds of pairs are left to the longest-first tail.
// FLASHBUILD_HOPPER_FWD_PAIRS, read at every launch (one process can time the settings in turns:
// benchmarks/fwd_tile_turnover/pairs_ab.sh), picks:
//   unset or empty (the default): at every length; one round left to the tail up to kPairMaxBlocks query blocks
//     a head, two past it (above).
//   short: up to kPairMaxBlocks, one round left to the tail; longest first alone past it.
//   all: at every length, one round left to the tail.
//   off: longest first alone.
//   short:N, all:N (N 1-8): N rounds left to the tail instead of 1 (balance.py --tail-rounds 3: max / mean key
//     blocks at hdim 64, 16k, 1.009 instead of 1.021).
// Another value is an error naming these (never a silent default).
struct FwdPairs {
  int max_blocks;        // PersistentTileScheduler::Arguments::pair_max_blocks
  int tail_rounds;       // ... ::pair_tail_rounds, up to kPairMaxBlocks query blocks a head
  int long_tail_rounds;  // ... past kPairMaxBlocks
  int tail(long long m_blocks) const { return m_blocks > kPairMaxBlocks ? long_tail_rounds : tail_rounds; }
};
inline FwdPairs fwd_pairs() {
  const char* v = std::getenv("FLASHBUILD_HOPPER_FWD_PAIRS");
  if (v == nullptr || *v == 0) { return {std::numeric_limits<int>::max(), 1, 2}; }
  const char* colon = std::strchr(v, ':');
  const size_t name = colon ? size_t(colon - v) : std::strlen(v);
  int tail = 1;
  bool ok = !colon || (colon[1] >= '1' && colon[1] <= '8' && colon[2] == 0);
  if (colon && ok) { tail = colon[1] - '0'; }
  if (ok && name == 5 && std::strncmp(v, "short", 5) == 0) { return {kPairMaxBlocks, tail, tail}; }
  if (ok && name == 3 && std::strncmp(v, "all", 3) == 0) { return {std::numeric_limits<int>::max(), tail, tail}; }
  if (!colon && std::strcmp(v, "off") == 0) { return {0, 1, 1}; }
  throw std::runtime_error("flashbuild: FLASHBUILD_HOPPER_FWD_PAIRS='" + shown_env_value(v) +
                           "' is not a setting of the Hopper forward's causal scheduler: unset (the default), short, "
                           "all, off, or short:N / all:N with N 1-8 pair rounds left to the tail; unset it (unset "
                           "FLASHBUILD_HOPPER_FWD_PAIRS) or set one of these");
}

}  // namespace flashbuild::hopper
