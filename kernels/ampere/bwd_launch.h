// Runtime flags -> template arguments for the Ampere-path backward: the dsum kernel, the main
// kernel, the dQ conversion (ampere/bwd_path.h). Each generated instantiation TU includes this
// header and instantiates one run_bwd<...>.
#pragma once

#include "ampere/bwd_path.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd(const BwdParams& params, cudaStream_t stream) {
  check_head_dim("run_bwd", kHeadDim, params.head_dim);
  ampere::run_bwd_path<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(params, stream);
}

}  // namespace flashbuild
