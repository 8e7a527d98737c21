// Runtime flags -> template arguments for the Ampere-path forward kernel. Each generated
// instantiation TU includes this header and instantiates one run_fwd<...>.
#pragma once

#include "ampere/fwd_kernel.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal>
void run_fwd(const FwdParams& params, cudaStream_t stream) {
  using Element = typename ampere::ElementOf<kDType>::type;
  constexpr ampere::FwdTile kTile = ampere::fwd_tile(kArch, kHeadDim, kIsCausal);
  using Traits = ampere::FwdTraits<kHeadDim, kTile.block_m, kTile.block_n, kTile.warps, Element>;

  if (params.head_dim != kHeadDim) {
    throw std::runtime_error("flashbuild: run_fwd for head dim " + std::to_string(kHeadDim) +
                             " was called with head_dim " + std::to_string(params.head_dim));
  }
  if (params.seqlen_q == 0 || params.batch == 0 || params.nheads == 0) { return; }

  auto kernel = &ampere::fwd_kernel<Traits, kIsCausal, false>;
  constexpr int kSmemBytes = Traits::kSmemBytes;
  if constexpr (kSmemBytes > 48 * 1024) {
    FLASHBUILD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  }
  const dim3 grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads, params.batch);
  kernel<<<grid, Traits::kNThreads, kSmemBytes, stream>>>(params);
  FLASHBUILD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flashbuild
