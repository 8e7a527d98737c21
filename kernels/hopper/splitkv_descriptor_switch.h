// Whether Hopper split-KV launches reuse the TMA descriptors of earlier calls (hopper/splitkv_descriptors.h). Apart
// from that header so the binding (kernels/binding/flash_api.cpp), which includes no CuTe, sets it: on by default,
// off for a call with FLASHBUILD_SPLITKV_PATH=fresh-descriptors (an A/B of the host time, one process).
#pragma once

#include <atomic>

namespace flashbuild::hopper {

inline std::atomic<bool>& splitkv_descriptor_cache_on() {
  static std::atomic<bool> on{true};
  return on;
}

}  // namespace flashbuild::hopper
