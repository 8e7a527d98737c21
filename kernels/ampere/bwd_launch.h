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

  if (params.head_dim != kHeadDim) {
    throw std::runtime_error("flashbuild: run_bwd for head dim " + std::to_string(kHeadDim) +
                             " was called with head_dim " + std::to_string(params.head_dim));
  }
  if (params.seqlen_k == 0 || params.batch == 0 || params.nheads == 0) { return; }

  auto kernel = &ampere::bwd_kernel<Traits, kIsCausal>;
  constexpr int kSmemBytes = Traits::kSmemBytes;
  if constexpr (kSmemBytes > 48 * 1024) {
    FLASHBUILD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  }
  const dim3 grid((params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN, params.nheads, params.batch);
  kernel<<<grid, Traits::kNThreads, kSmemBytes, stream>>>(params);
  FLASHBUILD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flashbuild
