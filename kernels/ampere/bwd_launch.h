// Runtime flags -> template arguments for the Ampere-path backward: the dsum kernel, the main
// kernel, the dQ conversion. Each generated instantiation TU includes this header and
// instantiates one run_bwd<...>.
#pragma once

#include "ampere/bwd_kernel.h"
#include "ampere/bwd_prepare.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd(const BwdParams& params, cudaStream_t stream) {
  using Element = typename ampere::ElementOf<kDType>::type;
  constexpr ampere::BwdTile kTile = ampere::bwd_tile(kArch, kHeadDim, kIsCausal);
  using Traits = ampere::BwdTraits<kHeadDim, kTile.block_m, kTile.block_n, kTile.warps, kTile.stages, Element>;
  static_assert(Traits::kSmemBytes <= ampere::max_smem_bytes(kArch),
                "this head dim's backward tile does not fit this arch's shared memory (hdim 192/256 on sm86/sm89)");

  ampere::check_head_dim("run_bwd", kHeadDim, params.head_dim);
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
