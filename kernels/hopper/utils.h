// Small device helpers of the Hopper kernels: issuing a warpgroup's wgmma products, named
// barriers by role.
#pragma once

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "hopper/traits.h"

namespace flashbuild::hopper {

// C (+)= A · B^T over all K steps, issued as one wgmma batch of this warpgroup. A is a tensor of
// shared-memory descriptors (kARegs = false) or registers (kARegs = true); B is descriptors.
// zero_init starts from C = 0 instead of reading it. With kWait >= 0 the call returns once at most
// kWait batches are still running; with kWait < 0 it returns at once and the caller waits
// (warpgroup_wait<N>) before touching C, or A when it is in registers.
template <int kWait, bool kARegs, class TiledMma, class FragA, class FragB, class FragC>
CUTE_DEVICE void wgmma(TiledMma& mma, FragA const& a, FragB const& b, FragC& c, bool zero_init) {
  static_assert(decltype(rank(a))::value == 3 && decltype(rank(b))::value == 3, "expects (MMA, MMA_M/N, MMA_K)");
  // The fences keep the compiler from moving register reads or writes of the operands across the
  // asynchronous product.
  if constexpr (kARegs) { warpgroup_fence_operand(const_cast<FragA&>(a)); }
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = zero_init ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) { warpgroup_wait<kWait>(); }
  warpgroup_fence_operand(c);
  if constexpr (kARegs) { warpgroup_fence_operand(const_cast<FragA&>(a)); }
}

CUTE_DEVICE void barrier_sync(FwdBarrier id, int threads) {
  cutlass::arch::NamedBarrier::sync(threads, static_cast<int>(id));
}
CUTE_DEVICE void barrier_arrive(FwdBarrier id, int threads) {
  cutlass::arch::NamedBarrier::arrive(threads, static_cast<int>(id));
}
CUTE_DEVICE FwdBarrier warpgroup_turn(int warpgroup) {
  return static_cast<FwdBarrier>(static_cast<int>(FwdBarrier::kWarpgroupTurn0) + warpgroup);
}

}  // namespace flashbuild::hopper
