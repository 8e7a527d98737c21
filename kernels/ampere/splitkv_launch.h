// Runtime flags -> template arguments for split-KV decoding: the forward kernel over one slice of
// the keys per split, then the combine kernel. With one split the forward kernel writes O directly.
#pragma once

#include "ampere/fwd_kernel.h"
#include "ampere/splitkv_combine.h"
#include "flash/splitkv_heuristic.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal>
void run_splitkv(const FwdParams& params, cudaStream_t stream) {
  using Element = typename ampere::ElementOf<kDType>::type;
  // Few query rows, many keys: a 64-row query block (4 warps) and long key blocks keep the loads
  // of K and V wide; memory, not the tensor cores, sets the pace here.
  using Traits = ampere::FwdTraits<kHeadDim, kSplitKVBlockM, splitkv_block_n(kHeadDim), 4, Element>;

  if (params.head_dim != kHeadDim) {
    throw std::runtime_error("flashbuild: run_splitkv for head dim " + std::to_string(kHeadDim) +
                             " was called with head_dim " + std::to_string(params.head_dim));
  }
  if (params.num_splits < 1 || params.num_splits > kMaxSplits) {
    throw std::runtime_error("flashbuild: run_splitkv needs 1.." + std::to_string(kMaxSplits) + " splits, got " +
                             std::to_string(params.num_splits));
  }
  if (params.seqlen_q == 0 || params.batch == 0 || params.nheads == 0) { return; }

  const bool split = params.num_splits > 1;
  auto kernel = split ? &ampere::fwd_kernel<Traits, kIsCausal, true> : &ampere::fwd_kernel<Traits, kIsCausal, false>;
  constexpr int kSmemBytes = Traits::kSmemBytes;
  if constexpr (kSmemBytes > 48 * 1024) {
    FLASHBUILD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  }
  const dim3 grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads,
                  params.batch * params.num_splits);
  kernel<<<grid, Traits::kNThreads, kSmemBytes, stream>>>(params);
  FLASHBUILD_CUDA_CHECK(cudaGetLastError());
  if (split) {
    const int64_t rows = int64_t(params.batch) * params.nheads * params.seqlen_q;
    const int blocks = int((rows + ampere::kCombineRowsPerBlock - 1) / ampere::kCombineRowsPerBlock);
    ampere::splitkv_combine_kernel<kHeadDim, Element><<<blocks, 32 * ampere::kCombineRowsPerBlock, 0, stream>>>(params);
    FLASHBUILD_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace flashbuild
