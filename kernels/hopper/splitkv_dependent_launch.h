// The Hopper split-KV as a programmatic dependent launch (PDL; FwdParams::dependent_launch, common/params.h).
// Launched with cudaLaunchAttributeProgrammaticStreamSerialization (hopper/splitkv_launch.h), the kernel's CTAs
// may become resident while the stream's previous kernel still drains: its launch, the CTAs' start, the barrier
// set-up and the TMA descriptor prefetch then overlap that kernel's tail instead of following it. A decode step
// of a few microseconds (batch 1, a short cache) pays that start-up once per call, back to back in a graph.
//
// The rule that keeps it correct: no global memory is read or written before griddepcontrol.wait, which
// returns once every kernel the launch depends on has completed and its writes are visible (q, the cache,
// cache_seqlens and the block table may all come from the previous kernel; o, the partials and the arrival
// counters may still be read by it). What runs before it touches shared memory and the kernel's parameters
// alone. Launched plainly (dependent_launch false), the wait returns at once.
// Once past the wait, the kernel lets the stream's next kernel launch (launch_dependents): a kernel launched
// the same way (the next decoding call) then starts its own CTAs on the SMs this one leaves idle and waits in
// turn; one launched plainly is not affected.
#pragma once

#include <cute/config.hpp>  // CUTE_DEVICE

namespace flashbuild::hopper {

// Called by every thread before its first global access (the kernel's start, after the barriers are set up).
CUTE_DEVICE void dependent_launch_wait_then_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace flashbuild::hopper
