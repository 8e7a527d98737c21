// Runtime flags -> template arguments for the Ampere-path backward kernel. Each generated
// instantiation TU includes this header and instantiates one run_bwd<...>.
#pragma once

#include "ampere/bwd_kernel.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal>
void run_bwd(const BwdParams& params, cudaStream_t stream) {
  using Element = typename ampere::ElementOf<kDType>::type;
  constexpr ampere::BwdTile kTile = ampere::bwd_tile(kArch, kHeadDim, kIsCausal);
  using Traits = ampere::BwdTraits<kHeadDim, kTile.block_m, kTile.block_n, kTile.warps, kTile.stages, Element>;

  ampere::check_head_dim("run_bwd", kHeadDim, params.head_dim);
  if (params.seqlen_k == 0 || params.batch == 0 || params.nheads == 0) { return; }
  const dim3 grid((params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN, params.nheads, params.batch);
  ampere::launch(&ampere::bwd_kernel<Traits, kIsCausal>, grid, Traits::kNThreads, Traits::kSmemBytes, stream, params);
}

}  // namespace flashbuild
