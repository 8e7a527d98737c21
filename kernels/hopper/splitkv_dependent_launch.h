// The Hopper split-KV as a programmatic dependent launch (PDL; FwdParams::dependent_launch, common/params.h).
// Launched with cudaLaunchAttributeProgrammaticStreamSerialization (hopper/fwd_launch.h, launch_fwd), the kernel's
// CTAs may become resident while the stream's previous kernel still drains: its launch, the CTAs' start, the
// barrier set-up and the TMA descriptor prefetch then overlap that kernel's tail instead of following it. A decode
// step of ten microseconds (batch 1, a short cache) pays that start-up once per call, back to back in a graph.
//
// The rule that keeps it correct: no global memory is read or written before griddepcontrol.wait, which
// returns once every kernel the launch depends on has completed and its writes are visible (q, the cache,
// cache_seqlens and the block table may all come from the previous kernel; o, the partials and the arrival
// counters may still be read by it). What runs before it touches shared memory and the kernel's parameters
// alone. Launched plainly (kNone), the wait returns at once.
// launch_dependents lets the stream's next kernel launch before this one ends, if that kernel was launched the
// same way (the next decoding call), which then starts its CTAs on the SMs this one leaves idle and waits in turn;
// a kernel launched plainly is not affected. kEarly releases it once past the wait, kLate once a CTA's tiles are
// computed (the stores and the split merge still to come); a CTA that never releases does at its exit.
#pragma once

#include <cute/config.hpp>  // CUTE_DEVICE

#include "common/params.h"  // DependentLaunch

namespace flashbuild::hopper {

CUTE_DEVICE void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Called by every thread before its first global access (the kernel's start, after the barriers are set up).
CUTE_DEVICE void dependent_launch_start(DependentLaunch mode) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  if (mode == DependentLaunch::kEarly) { launch_dependents(); }
}

// Called by the consumers when a tile's keys are done (its softmax finalized).
CUTE_DEVICE void dependent_launch_tile_done(DependentLaunch mode) {
  if (mode == DependentLaunch::kLate) { launch_dependents(); }
}

}  // namespace flashbuild::hopper
