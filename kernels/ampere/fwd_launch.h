// Runtime flags -> template arguments for the Ampere-path forward kernel. Each generated
// instantiation TU includes this header and instantiates one run_fwd<...>.
#pragma once

#include "ampere/fwd_kernel.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd(const FwdParams& params, cudaStream_t stream) {
  using Element = typename ampere::ElementOf<kDType>::type;
  constexpr ampere::FwdTile kTile = ampere::fwd_tile(kArch, kHeadDim, kIsCausal);
  using Traits = ampere::FwdTraits<kHeadDim, kTile.block_m, kTile.block_n, kTile.warps, Element, kTile.persistent>;
  static_assert(Traits::kSmemBytes <= ampere::max_smem_bytes(kArch), "forward tile exceeds the arch's shared memory");

  ampere::check_head_dim("run_fwd", kHeadDim, params.head_dim);
  if (params.seqlen_q == 0 || params.batch == 0 || params.nheads == 0) { return; }
  dim3 grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads, params.batch);
  if constexpr (Traits::kPersistent) {  // one CTA per SM, each walking query blocks (fwd_kernel)
    grid = dim3(std::min<int64_t>(int64_t(grid.x) * grid.y * grid.z, ampere::sm_count()));
  }
  ampere::launch(&ampere::fwd_kernel<Traits, kIsCausal, ampere::FwdMode::kFull, kFeatures>, grid, Traits::kNThreads,
                 Traits::kSmemBytes, stream, params);
}

}  // namespace flashbuild
