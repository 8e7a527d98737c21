// Host-side checks the Hopper launchers (fwd_launch.h, bwd_launch.h) make before handing a call to
// a TMA-fed kernel: what TMA can address, and the strides it insists on even where it never steps.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "common/params.h"  // vector_addressable

namespace flashbuild::hopper {

// TMA addresses global memory in 16-byte units: base pointers and every stride it steps by. That is
// the rule every kernel's vector loads share (common/params.h's vector_addressable), so this is that
// check, under the name the launchers ask it by. (stride, extent) pairs in elements of elem_bytes.
inline bool tma_addressable(const void* ptr, int64_t elem_bytes,
                            std::initializer_list<std::pair<int64_t, int64_t>> strides) {
  return vector_addressable(ptr, elem_bytes, strides);
}

// A stride over an extent of 1 is never stepped; TMA still checks it, so give it a valid one.
inline int64_t unit_extent_stride(int64_t stride, int extent, int64_t valid) { return extent > 1 ? stride : valid; }

}  // namespace flashbuild::hopper
