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
// bf16) the 176-key tiles were 1.016x at 8k and 1.021-1.022x at 16k, 0.987-0.988x at 4k and down to 0.917x at 512
// (where a query block walks few key blocks, the last part-empty: 2.9 blocks of 176 keys against 4 of 128; not
// profiled). Lengths between 4k and 8k were not measured.
constexpr int kWideKeysFrom = 8192;

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
