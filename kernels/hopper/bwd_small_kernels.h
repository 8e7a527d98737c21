// The Hopper backward's small kernels behind BwdSmallKernels (hopper/bwd_launch.h declares it): dsum (the
// family-neutral launch_dot_do_o, common/bwd_dsum.h) and the dQ conversion of the traits' order
// (hopper/bwd_dq_accum.h).
//
// Every backward variant of one head dim and dtype (causal or not, with features or not) launches the same
// small kernels: compiled in each variant's TU, they were compiled up to four times over (device code, and
// the headers parsed again for it). So one TU of the group includes this header and instantiates
// BwdSmallKernels (the build picks it: the group's first variant, templates/bwd_instantiate.cu.j2); the others
// include none of the kernels' code, are host code alone, and link to that TU's launches (each launch
// <<<>>>es its kernel in the TU that compiled it).
#pragma once

#include "common/bwd_dsum.h"
#include "hopper/bwd_dq_accum.h"
#include "hopper/bwd_launch.h"

namespace flashbuild::hopper {

template <class Traits>
void BwdSmallKernels<Traits>::dsum(const BwdParams& params, cudaStream_t stream) {
  launch_dot_do_o<typename Traits::Element>(params, stream);
}

template <class Traits>
void BwdSmallKernels<Traits>::convert_dq(const BwdParams& params, cudaStream_t stream) {
  if constexpr (Traits::kDqFragmentOrder) {
    const dim3 grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads, params.batch);
    bwd_convert_dq_fragment_kernel<Traits><<<grid, Traits::kNumMmaThreads, 0, stream>>>(params);
  } else {
    const int64_t vecs = int64_t(params.seqlen_q) * Traits::kHeadDim / 4;
    const dim3 grid(unsigned((vecs + kConvertThreads - 1) / kConvertThreads), params.nheads, params.batch);
    bwd_convert_dq_kernel<typename Traits::Element, Traits::kHeadDim><<<grid, kConvertThreads, 0, stream>>>(params);
  }
}

}  // namespace flashbuild::hopper
