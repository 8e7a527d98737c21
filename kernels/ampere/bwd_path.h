// The Ampere-path backward's three launches (the dsum kernel, the main kernel, the dQ conversion)
// for one tile choice: ampere/bwd_launch.h's run_bwd calls it. A header of its own, without a
// flashbuild::run_bwd, so that a TU that defines the Hopper run_bwd can launch the Ampere path beside it
// (the tuning harness benchmarks/hopper_bwd/hopper_bwd.py compares the two families in one extension).
#pragma once

#include "ampere/bwd_kernel.h"
#include "ampere/bwd_prepare.h"

namespace flashbuild {
namespace ampere {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd_path(const BwdParams& params, cudaStream_t stream) {
  using Element = typename ElementOf<kDType>::type;
  constexpr BwdTile kTile = bwd_tile(kArch, kHeadDim);
  using Traits = BwdTraits<kHeadDim, kTile.block_m, kTile.block_n, kTile.warps, kTile.stages, Element>;
  static_assert(Traits::kSmemBytes <= max_smem_bytes(kArch),
                "this head dim's backward tile does not fit this arch's shared memory (hdim 192/256 on sm86/sm89)");

  if (params.batch == 0 || params.nheads == 0) { return; }
  check_grid_yz("the Ampere-path backward", params.nheads, params.batch);
  if (params.dq_semaphore && kFeatures == kNoFeatures) {
    // The binding routes deterministic calls to the feature kernel; reaching here is a routing bug.
    throw std::runtime_error("flashbuild: internal error: a deterministic backward call reached the plain kernel, "
                             "which has no deterministic mode (bwd_kernel.h); please report it");
  }
  if (params.seqlen_q > 0) {
    launch_dot_do_o<Element>(params, stream);
  }
  // With no query rows the main kernel still runs: it writes the zero dK and dV of every key.
  if (params.seqlen_k > 0) {
    const dim3 grid((params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN, params.nheads, params.batch);
    launch(&bwd_kernel<Traits, kIsCausal, kFeatures>, grid, Traits::kNThreads, Traits::kSmemBytes, stream, params);
  }
  if (params.seqlen_q > 0) {
    const dim3 convert_grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads, params.batch);
    launch(&bwd_convert_dq_kernel<Traits>, convert_grid, Traits::kNThreads, Traits::kSmemQdOBytes, stream, params);
  }
}

}  // namespace ampere
}  // namespace flashbuild
