// The Ampere-path forward's launch for one tile choice: ampere/fwd_launch.h's run_fwd calls it. A header of its
// own, without a flashbuild::run_fwd, so that a TU that defines the Hopper run_fwd can launch the Ampere path beside
// it (the tuning harness benchmarks/hopper_fwd/hopper_fwd.py compares the two families in one extension), as
// ampere/bwd_path.h does for the backward.
#pragma once

#include <stdexcept>

#include "ampere/fwd_kernel.h"

namespace flashbuild {
namespace ampere {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd_path(const FwdParams& params, cudaStream_t stream) {
  using Element = typename ElementOf<kDType>::type;
  constexpr FwdTile kTile = fwd_tile(kArch, kHeadDim, kIsCausal);
  using Traits = FwdTraits<kHeadDim, kTile.block_m, kTile.block_n, kTile.warps, Element>;
  static_assert(Traits::kSmemBytes <= max_smem_bytes(kArch), "forward tile exceeds the arch's shared memory");

  if (params.seqlen_q == 0 || params.batch == 0 || params.nheads == 0) { return; }
  if (params.block_table) {  // this kernel reads k and v as dense tensors: a page table would be ignored
    throw std::runtime_error("flashbuild: internal error: a paged KV-cache call reached the Ampere-path forward, "
                             "which does not page (the binding sends such calls to the split-KV kernel or the "
                             "Hopper forward); please report it");
  }
  const dim3 grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads, params.batch);
  check_grid_yz("the Ampere-path forward", params.nheads, params.batch);
  launch(&fwd_kernel<Traits, kIsCausal, FwdMode::kFull, kFeatures>, grid, Traits::kNThreads, Traits::kSmemBytes,
         stream, params);
}

}  // namespace ampere
}  // namespace flashbuild
