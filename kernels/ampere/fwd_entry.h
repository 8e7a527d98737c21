// What the host side of a launch of the Ampere-path forward kernel needs when its TU does not compile that
// kernel: the kernel's modes and the entry through which the launch reaches it (the Hopper forward's
// counterpart: hopper/fwd_params.h). The split-KV launch (splitkv_launch.h) includes this header, not
// fwd_kernel.h: its forward kernel compiles device-only in a TU of its own (<variant>_kernel.cu), beside the
// launch TU, which keeps the small kernels (appending to the cache, combining the splits).
#pragma once

#include "common/kernel_library.h"

namespace flashbuild::ampere {

// What one launch of the forward kernel reads and writes.
enum class FwdMode {
  kFull,         // flash_attn_func / varlen: contiguous K/V, O and the LSE written directly
  kDecode,       // split-KV: K/V from a KV cache (common/kv_cache.h); with one split O written directly, with
                 // several the key blocks of split blockIdx.z % num_splits only and an fp32 partial result for
                 // the combine kernel (a runtime choice: one kernel serves both)
};

// Where a launch finds fwd_kernel<Traits, kIsCausal, kMode, kFeatures>. fwd_kernel.h defines `get` as the
// kernel's own symbol, for a TU that compiles the kernel; a split-KV variant's launch TU, which does not
// include fwd_kernel.h, specializes `get` to the fatbin of the kernel TU that compiles that kernel
// device-only (templates/splitkv_instantiate.cu.j2); the kernel TU instantiates this struct, and through
// `get` the kernel (templates/splitkv_kernel.cu.j2).
template <class Traits, bool kIsCausal, FwdMode kMode, int kFeatures>
struct FwdKernelEntry {
  static const KernelHandle& get();
};

}  // namespace flashbuild::ampere
