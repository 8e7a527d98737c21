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

// FLASHBUILD_HOPPER_FWD_PAIRS=short (the default before 2026-11-30) pairs only up to this many query blocks a head
// (4k at 128-row tiles, 6k at hdim 64's 192 rows). Timed in turns, one call of each setting a round (flashbuild
// bench's protocol), `all` won at 4k (1.091x, 1.034x, 1.015x at hdim 64 / 128 / 256) and lost at 16k (0.989x,
// 0.997x, 0.997x: the static deal of pairs evens the CTAs out less well than longest first, balance.py)
// (benchmarks/checks/merged-5). Calls in turns share one clock, and the card runs at its power limit: what the
// turns leave out is the energy a call takes. Each setting timed alone for 1.5 s (benchmarks/fwd_clock_power/,
// h200-4), pairs at every length with two rounds left to the tail read about a quarter of the DRAM bytes at 16k and
// run at a higher clock: 1.012-1.066x at 8k, 1.002-1.038x at 16k (hdim 256 to 64), 0.985-1.009x per clock tick, and
// in turns 0.994-1.004x. So the default is `all:2`.
#ifdef FLASHBUILD_HOPPER_FWD_PAIR_MAX_BLOCKS
constexpr int kPairMaxBlocks = FLASHBUILD_HOPPER_FWD_PAIR_MAX_BLOCKS;  // sweeps; 0: longest first alone
#else
constexpr int kPairMaxBlocks = 32;
#endif

// Pairs of causal query blocks (tile_scheduler.h: a head's query blocks m and M - 1 - m on neighbouring CTAs
// before a longest-first tail, so its K/V is read about once instead of once per ~2 rounds of other heads) up to
// how many query blocks a head. FLASHBUILD_HOPPER_FWD_PAIRS, read at every launch (one process can time the
// settings in turns: benchmarks/fwd_tile_turnover/pairs_ab.sh), picks:
//   all:2 (the default, also when unset or empty): at every length, two whole rounds of pairs left to the tail
//     (above).
//   short: up to kPairMaxBlocks (32: 4k queries at 128-row tiles), then longest first alone.
//   all: at every length.
//   off: longest first alone.
//   short:N, all:N (N 1-8): N whole rounds of pairs left to the longest-first tail instead of 1 (balance.py
//     --tail-rounds 3: max / mean key blocks at hdim 64, 16k, 1.009 instead of 1.021).
// Another value is an error naming these (never a silent default).
struct FwdPairs {
  int max_blocks;   // PersistentTileScheduler::Arguments::pair_max_blocks
  int tail_rounds;  // ... ::pair_tail_rounds
};
inline FwdPairs fwd_pairs() {
  const char* v = std::getenv("FLASHBUILD_HOPPER_FWD_PAIRS");
  if (v == nullptr || *v == 0) { return {std::numeric_limits<int>::max(), 2}; }
  const char* colon = std::strchr(v, ':');
  const size_t name = colon ? size_t(colon - v) : std::strlen(v);
  int tail = 1;
  bool ok = !colon || (colon[1] >= '1' && colon[1] <= '8' && colon[2] == 0);
  if (colon && ok) { tail = colon[1] - '0'; }
  if (ok && name == 5 && std::strncmp(v, "short", 5) == 0) { return {kPairMaxBlocks, tail}; }
  if (ok && name == 3 && std::strncmp(v, "all", 3) == 0) { return {std::numeric_limits<int>::max(), tail}; }
  if (!colon && std::strcmp(v, "off") == 0) { return {0, 1}; }
  throw std::runtime_error("flashbuild: FLASHBUILD_HOPPER_FWD_PAIRS='" + shown_env_value(v) +
                           "' is not a setting of the Hopper forward's causal scheduler: all:2 (the default), short, "
                           "all, off, or short:N / all:N with N 1-8 pair rounds left to the tail; unset it (unset "
                           "FLASHBUILD_HOPPER_FWD_PAIRS) or set one of these");
}

}  // namespace flashbuild::hopper
