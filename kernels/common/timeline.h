// A study build's timeline of the Hopper split-KV decode tile's CTAs (benchmarks/decode_timeline/README.md): with
// -DFLASHBUILD_SPLITKV_TIMELINE=1 (an nvcc flag: flashbuild.load(..., nvcc_flags=[...])) each CTA's recorder thread
// (the consumer warpgroup's first) writes %globaltimer at the points of TimelineSlot, its SM and its first tile's
// coordinates, into a device buffer that the caller names in FLASHBUILD_SPLITKV_TIMELINE (below). Without the define
// every piece here is empty and compiles to nothing: the default kernels' SASS is unchanged (checked:
// benchmarks/house_sass/README.md, "The decode timeline study build").
//
// How the buffer reaches the kernel without changing what the binding builds: the binding (compiled as host C++,
// without nvcc's flags) never sees the define, so FwdParams keeps its layout; the kernel's own parameter struct, which
// only nvcc-compiled TUs build (the launch TU) and read (the kernel TU), gains a trailing pointer under the define
// (hopper/fwd_params.h, FwdKernelParams::timeline). The launch sets it from the environment at each launch.
#pragma once

#include <cute/config.hpp>  // CUTE_DEVICE

#include <cstddef>  // std::nullptr_t
#include <cstdint>

#if FLASHBUILD_SPLITKV_TIMELINE
#include <cuda.h>  // cuMemGetAddressRange's types (reached through the runtime's entry-point lookup)
#include <cuda_runtime.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "common/env_value.h"  // shown_env_value
#endif

namespace flashbuild {

// One CTA's record: kTimelineWords uint64 words at buffer + (call * ctas + blockIdx.x) * kTimelineWords.
enum TimelineSlot : int {
  kTimelineEntry = 0,       // the kernel's first instructions (stored after griddepcontrol.wait: no write before it)
  kTimelineWaited = 1,      // griddepcontrol.wait returned (the previous kernel of the stream is complete)
  kTimelineFirstStage = 2,  // the first tile's first K stage has landed (the consumer's first mbarrier wait done)
  kTimelineLastBlock = 3,   // the last tile's last product (its last block's P V) is done
  kTimelineStore = 4,       // the last tile normalised: its stores (partials or O) and the merge follow
  kTimelineEnd = 5,         // after the stores and the merge, the CTA's last instructions
  kTimelineWhere = 6,       // smid | tiles << 32 | merged << 48 (merged: this CTA merged its tile's splits)
  kTimelineTile = 7,        // the first tile: batch | head << 16 | split << 32 | splits << 48
  kTimelineClocks = 8,      // 8-11: %clock64 at entry, first stage, last block, end (one SM's cycles)
  kTimelineWords = 16,
};

#if FLASHBUILD_SPLITKV_TIMELINE

CUTE_DEVICE uint64_t timeline_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

CUTE_DEVICE uint64_t timeline_clock() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}

// The recorder thread's view of its CTA's record (rec null: another thread, or no buffer given).
struct Timeline {
  uint64_t* rec = nullptr;
  uint64_t entry = 0, entry_clock = 0;
  int tiles = 0;
  bool did_merge = false;

  // At the kernel's start, before griddepcontrol.wait: the entry time is kept in registers until `waited`.
  CUTE_DEVICE Timeline(uint64_t* buffer, int recorder_thread) {
    if (buffer != nullptr && int(threadIdx.x) == recorder_thread) {
      entry = timeline_now(), entry_clock = timeline_clock();
      rec = buffer + uint64_t(blockIdx.x) * kTimelineWords;
    }
  }
  CUTE_DEVICE void waited() {
    if (rec) {
      rec[kTimelineWaited] = timeline_now();
      rec[kTimelineEntry] = entry, rec[kTimelineClocks] = entry_clock;
      uint32_t smid;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
      rec[kTimelineWhere] = smid;
    }
  }
  CUTE_DEVICE void record(int slot) const {
    if (rec) { rec[slot] = timeline_now(); }
  }
  // The first tile's first stage and coordinates; the clock beside.
  CUTE_DEVICE void first_stage(int batch, int head, int split, int splits) {
    if (rec && tiles++ == 0) {
      rec[kTimelineFirstStage] = timeline_now(), rec[kTimelineClocks + 1] = timeline_clock();
      rec[kTimelineTile] = uint64_t(uint16_t(batch)) | uint64_t(uint16_t(head)) << 16 |
                           uint64_t(uint16_t(split)) << 32 | uint64_t(uint16_t(splits)) << 48;
    }
  }
  CUTE_DEVICE void last_block() const {
    if (rec) { rec[kTimelineLastBlock] = timeline_now(), rec[kTimelineClocks + 2] = timeline_clock(); }
  }
  // Whether this CTA merged a tile's splits (FwdEpilogue::combine_if_last's answer, which the call evaluates anyway).
  CUTE_DEVICE void merged(bool last) { did_merge |= last; }
  CUTE_DEVICE void end() const {
    if (rec) {
      rec[kTimelineEnd] = timeline_now(), rec[kTimelineClocks + 3] = timeline_clock();
      rec[kTimelineWhere] |= uint64_t(uint32_t(tiles)) << 32 | uint64_t(did_merge) << 48;
    }
  }
};

template <class KernelParams>
CUTE_DEVICE uint64_t* timeline_buffer(KernelParams const& params) { return params.timeline; }

// The allocation that holds `address` (its end), through the driver's cuMemGetAddressRange; 0 where it cannot tell.
inline uint64_t timeline_allocation_end(uint64_t address) {
  using RangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  void* pfn = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  const cudaError_t status = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &pfn, 12000, cudaEnableDefault,
                                                              &found);
#else
  const cudaError_t status = cudaGetDriverEntryPoint("cuMemGetAddressRange", &pfn, cudaEnableDefault, &found);
#endif
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || pfn == nullptr) {
    (void)cudaGetLastError();
    return 0;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (reinterpret_cast<RangeFn>(pfn)(&base, &size, CUdeviceptr(address)) != CUDA_SUCCESS) { return 0; }
  return uint64_t(base) + size;
}

// Host side: which record block a launch of `ctas` CTAs writes.
// FLASHBUILD_SPLITKV_TIMELINE=<address>:<calls>:<ctas>:<tag>
// (decimal; address: a device allocation of calls * ctas * kTimelineWords uint64 words, zeroed by the caller).
// Launches number from 0 each time the variable's value changes (a new tag: the study sets one before each capture
// or eager pass); launch n writes block n, and launches past `calls` write nothing. Unset: no records. A new buffer
// is checked (device memory, large enough) at its first launch; timeline.py makes that an eager one, not a capture.
inline uint64_t* timeline_launch_buffer(int ctas) {
  static std::mutex mutex;
  static std::string last;
  static uint64_t base = 0, calls = 0, capacity = 0, next = 0;
  // The last buffer checked: a new tag alone (as at a graph's capture, where the study primes it) checks nothing.
  static uint64_t checked[3] = {};
  constexpr const char* kVar = "FLASHBUILD_SPLITKV_TIMELINE";
  const char* value = std::getenv(kVar);
  if (value == nullptr || *value == '\0') { return nullptr; }
  std::lock_guard<std::mutex> lock(mutex);
  if (last != value) {
    uint64_t fields[3] = {};
    const char* at = value;
    for (int i = 0; i < 3; ++i) {
      char* stop = nullptr;
      errno = 0;
      fields[i] = std::strtoull(at, &stop, 10);  // digits alone: strtoull would take a sign or leading spaces too
      if (*at < '0' || *at > '9' || errno == ERANGE || *stop != ':' || fields[i] == 0) {
        throw std::runtime_error(std::string("flashbuild: ") + kVar + "=" + shown_env_value(value) +
                                 " is not <address>:<calls>:<ctas>:<tag> with decimal non-zero numbers; "
                                 "benchmarks/decode_timeline/timeline.py sets it");
      }
      at = stop + 1;
    }
    // The records must stay inside the allocation (a caching allocator's block may be larger than the tensor: this
    // bounds the writes to memory of the caller's, not to the tensor; timeline.py sizes the tensor exactly).
    if (fields[0] != checked[0] || fields[1] != checked[1] || fields[2] != checked[2]) {
      cudaPointerAttributes attributes{};
      if (cudaPointerGetAttributes(&attributes, reinterpret_cast<void*>(fields[0])) != cudaSuccess ||
          attributes.type != cudaMemoryTypeDevice) {
        (void)cudaGetLastError();
        throw std::runtime_error(std::string("flashbuild: ") + kVar + "=" + shown_env_value(value) +
                                 ": the address is not device memory; pass a CUDA tensor's data_ptr()");
      }
      const uint64_t bytes = fields[1] * fields[2] * kTimelineWords * sizeof(uint64_t);
      const uint64_t end = timeline_allocation_end(fields[0]);
      if (fields[1] > (uint64_t(1) << 24) || fields[2] > (uint64_t(1) << 24) || end == 0 || end - fields[0] < bytes) {
        throw std::runtime_error(std::string("flashbuild: ") + kVar + "=" + shown_env_value(value) + ": " +
                                 std::to_string(fields[1]) + " calls of " + std::to_string(fields[2]) +
                                 " CTAs need " + std::to_string(bytes) + " bytes from the address, which its device "
                                 "allocation does not hold (or its range is unknown)");
      }
      checked[0] = fields[0], checked[1] = fields[1], checked[2] = fields[2];
    }
    last = value, base = fields[0], calls = fields[1], capacity = fields[2], next = 0;
  }
  if (uint64_t(ctas) > capacity) {
    throw std::runtime_error(std::string("flashbuild: ") + kVar + " holds " + std::to_string(capacity) +
                             " CTAs a call; this launch has " + std::to_string(ctas) + ": give a larger buffer");
  }
  if (next >= calls) { return nullptr; }
  return reinterpret_cast<uint64_t*>(base) + (next++) * capacity * kTimelineWords;
}

#else

// Without the define: no state, no code.
struct Timeline {
  CUTE_DEVICE Timeline(std::nullptr_t, int) {}
  CUTE_DEVICE void waited() const {}
  CUTE_DEVICE void record(int) const {}
  CUTE_DEVICE void first_stage(int, int, int, int) const {}
  CUTE_DEVICE void last_block() const {}
  CUTE_DEVICE void merged(bool) const {}
  CUTE_DEVICE void end() const {}
};

template <class KernelParams>
CUTE_DEVICE std::nullptr_t timeline_buffer(KernelParams const&) { return nullptr; }

#endif

}  // namespace flashbuild
