// The Ampere-path forward of sm90 TUs, run_fwd_ampere_path, which hopper/fwd_launch.h declares and
// routes to (varlen calls, tensors TMA cannot address, head dim 32). Its own header, so the Hopper
// TU never parses or compiles the Ampere kernel: a variant's fallback TU (<variant>_fallback.cu)
// includes this header alone and instantiates it; a variant with no Hopper tile includes it beside
// hopper/fwd_launch.h in its one TU. Launched exactly as ampere/fwd_launch.h launches it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ampere/fwd_kernel.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd_ampere_path(const FwdParams& params, cudaStream_t stream) {
  using Element = typename ampere::ElementOf<kDType>::type;
  constexpr ampere::FwdTile kTile = ampere::fwd_tile(kArch, kHeadDim, kIsCausal);
  using Traits = ampere::FwdTraits<kHeadDim, kTile.block_m, kTile.block_n, kTile.warps, Element, kTile.persistent>;
  static_assert(Traits::kSmemBytes <= ampere::max_smem_bytes(kArch), "forward tile exceeds the arch's shared memory");

  dim3 grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads, params.batch);
  if constexpr (Traits::kPersistent) {
    grid = dim3(std::min<int64_t>(int64_t(grid.x) * grid.y * grid.z, ampere::sm_count()));
  }
  ampere::launch(&ampere::fwd_kernel<Traits, kIsCausal, ampere::FwdMode::kFull, kFeatures>, grid, Traits::kNThreads,
                 Traits::kSmemBytes, stream, params);
}

}  // namespace flashbuild
