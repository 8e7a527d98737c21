// What both Hopper (sm_90a) kernels, forward and backward, build on: the warpgroup, the register file and
// shared memory of an SM, the K-major swizzle atom of their shared-memory tiles, and the CUTLASS headers
// of wgmma, TMA, named barriers, setmaxnreg and the TMA pipelines. The forward's tiles are in
// fwd_traits.h, the backward's in bwd_traits.h: an edit to one recompiles only that direction's TUs.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "common/numeric.h"
#include "common/params.h"

namespace flashbuild::hopper {

using namespace cute;

// Spelled hopper::ElementOf by the launch headers and the generated TUs.
using flashbuild::ElementOf;

// Threads of one warpgroup: the unit that issues a wgmma, and the unit setmaxnreg acts on.
constexpr int kWarpgroupThreads = 128;
// Query rows one consumer warpgroup owns: the M of one wgmma.
constexpr int kRowsPerWarpgroup = 64;
// Registers in the whole SM register file, shared by the CTA (one CTA per SM).
constexpr int kRegisterFile = 64 * 1024;
// Opt-in dynamic shared memory per block on sm90 (228 KB less the 1 KB the system keeps).
constexpr int kMaxSmemBytes = 227 * 1024;

// Shared-memory rows of head_dim 16-bit elements, in the widest GMMA swizzle atom that tiles them.
template <class Element, int kRowElems>
CUTE_HOST_DEVICE constexpr auto k_major_smem_atom() {
  if constexpr (kRowElems % 64 == 0) {
    return GMMA::Layout_K_SW128_Atom<Element>{};
  } else if constexpr (kRowElems % 32 == 0) {
    return GMMA::Layout_K_SW64_Atom<Element>{};
  } else {
    static_assert(kRowElems % 16 == 0, "head dim must be a multiple of 16 (one wgmma K step)");
    return GMMA::Layout_K_SW32_Atom<Element>{};
  }
}

}  // namespace flashbuild::hopper
