// FLASHBUILD_HOPPER_FWD_KV_MULTICAST, whether the Hopper forward launches its multicast-capable kernels (fwd_params.h,
// kMulticastKV) in clusters of two CTAs that share each K and V box (fwd_launch.h, launch_fwd). Read at every launch,
// so one process can time both forms in turns or alone (benchmarks/fwd_kv_multicast/). Host code alone, no CUDA or
// CuTe: tests/fuzz compiles it with the host compiler and feeds it arbitrary values.
#pragma once

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/env_value.h"

namespace flashbuild::hopper {

// unset or empty, or `on`: clusters where the call allows them (the default); `off`: one CTA a box, as before.
// Another value is an error naming the variable and the values it takes (never a silent default).
inline bool fwd_kv_multicast() {
  const char* v = std::getenv("FLASHBUILD_HOPPER_FWD_KV_MULTICAST");
  if (v == nullptr || *v == 0 || std::strcmp(v, "on") == 0) { return true; }
  if (std::strcmp(v, "off") == 0) { return false; }
  throw std::runtime_error("flashbuild: FLASHBUILD_HOPPER_FWD_KV_MULTICAST='" + shown_env_value(v) +
                           "' is not a setting: set `on` (two CTAs share each K and V box where a call allows it, "
                           "the default) or `off` (one CTA a box), or unset it (unset "
                           "FLASHBUILD_HOPPER_FWD_KV_MULTICAST)");
}

}  // namespace flashbuild::hopper
