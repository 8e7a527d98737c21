// The Ampere-path backward of sm90 TUs, run_bwd_ampere_path, which hopper/bwd_launch.h declares and
// routes to (varlen calls, tensors TMA cannot address, head dims 32/96/192/256, feature TUs). Its own
// header, so the Hopper TU never parses or compiles the Ampere backward kernel: a variant's fallback
// TU (<variant>_fallback.cu) includes this header alone and instantiates it; a variant with no Hopper
// backward includes it beside hopper/bwd_launch.h in its one TU. Launched exactly as
// ampere/bwd_launch.h launches it.
#pragma once

#include "ampere/bwd_kernel.h"
#include "ampere/bwd_prepare.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd_ampere_path(const BwdParams& params, cudaStream_t stream) {
  using Element = typename ampere::ElementOf<kDType>::type;
  constexpr ampere::BwdTile kTile = ampere::bwd_tile(kArch, kHeadDim, kIsCausal);
  using Traits = ampere::BwdTraits<kHeadDim, kTile.block_m, kTile.block_n, kTile.warps, kTile.stages, Element>;
  static_assert(Traits::kSmemBytes <= ampere::max_smem_bytes(kArch),
                "this head dim's backward tile does not fit this arch's shared memory (hdim 192/256 on sm86/sm89)");
  if (params.batch == 0 || params.nheads == 0) { return; }
  if (params.seqlen_q > 0) {
    const dim3 dot_grid((params.seqlen_q + ampere::kDotRowsPerBlock - 1) / ampere::kDotRowsPerBlock, params.nheads,
                        params.batch);
    ampere::launch(&ampere::bwd_dot_do_o_kernel<Element>, dot_grid, 32 * ampere::kDotRowsPerBlock, 0, stream, params);
  }
  // With no query rows the main kernel still runs: it writes the zero dK and dV of every key.
  if (params.seqlen_k > 0) {
    const dim3 grid((params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN, params.nheads, params.batch);
    ampere::launch(&ampere::bwd_kernel<Traits, kIsCausal, kFeatures>, grid, Traits::kNThreads, Traits::kSmemBytes,
                   stream, params);
  }
  if (params.seqlen_q > 0) {
    const dim3 convert_grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads, params.batch);
    ampere::launch(&ampere::bwd_convert_dq_kernel<Traits>, convert_grid, Traits::kNThreads, Traits::kSmemQdOBytes,
                   stream, params);
  }
}

}  // namespace flashbuild
