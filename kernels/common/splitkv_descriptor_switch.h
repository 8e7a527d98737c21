// Whether Hopper split-KV launches reuse the TMA descriptors of earlier calls (hopper/splitkv_descriptors.h). Apart
// from that header, and in common/, so the binding (kernels/binding/flash_api.cpp), whose includes stay torch-free
// declarations of common/ (tests/test_binding_includes.py), sets it: on by default, off for a call with
// FLASHBUILD_SPLITKV_PATH=fresh-descriptors (an A/B of the host time, one process).
#pragma once

#include <atomic>

namespace flashbuild {

inline std::atomic<bool>& splitkv_descriptor_cache_on() {
  static std::atomic<bool> on{true};
  return on;
}

}  // namespace flashbuild
