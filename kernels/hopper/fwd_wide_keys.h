// FLASHBUILD_HOPPER_FWD_WIDE_FROM, the number of keys from which a Hopper forward variant with 176-key tiles
// (fwd_params.h, kWideKeys) runs them rather than its 128-key kernel; the launcher (fwd_launch.h, run_fwd_sm90)
// reads it at every launch. Host code alone, no CUDA or CuTe: tests/fuzz compiles it with the host compiler and
// feeds it arbitrary values.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/env_value.h"

namespace flashbuild::hopper {

// From how many keys (seqlen_k: with cu_seqlens the longest sequence's) a variant with wide tiles runs its main
// kernel; shorter calls run its 128-key kernel. In turns on the H200 (benchmarks/fwd_tile_hdim128_176, fp16 and
// bf16, the 176-key kernel with FA3's waits and turns since h200-1): the 176-key tiles were 1.028-1.031x at 6k and
// 8k, 1.000 at 5k, 0.992 at 4k and 0.97 at 2k (h200-2; 1.021-1.022x at 16k in h200-1). Below, a query block walks
// few key blocks and the last, part-empty one costs more of them: 5k keys fill 30 blocks of 176 to 3.1 % padding
// (29.1 blocks), 6k fill 35 to 0.3 %.
constexpr int kWideKeysFrom = 6144;

// FLASHBUILD_HOPPER_FWD_WIDE_FROM=<keys>, read at every launch (one process can time both kernels in turns:
// benchmarks/fwd_tile_hdim128_176/ab.py), sets that number: a whole number from 0 (every unpaged call on the wide
// tiles) to 2147483647 (none); unset or empty: kWideKeysFrom. Another value is an error naming the variable and
// the range (never a silent default).
inline int wide_keys_from() {
  const char* v = std::getenv("FLASHBUILD_HOPPER_FWD_WIDE_FROM");
  if (v == nullptr || *v == 0) { return kWideKeysFrom; }
  int64_t keys = 0;
  for (const char* c = v; *c; ++c) {
    keys = *c < '0' || *c > '9' ? -1 : keys * 10 + (*c - '0');
    if (keys < 0 || keys > std::numeric_limits<int>::max()) {
      throw std::runtime_error("flashbuild: FLASHBUILD_HOPPER_FWD_WIDE_FROM='" + shown_env_value(v) +
                               "' is not a number of keys: set a whole number from 0 (every unpaged call on the "
                               "176-key tiles) to " + std::to_string(std::numeric_limits<int>::max()) +
                               " (none), or unset it (unset FLASHBUILD_HOPPER_FWD_WIDE_FROM) for the default, " +
                               std::to_string(kWideKeysFrom));
    }
  }
  return int(keys);
}

}  // namespace flashbuild::hopper
