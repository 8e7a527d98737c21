// Runtime flags -> template arguments for the Ampere-path forward kernel (ampere/fwd_path.h). Each
// generated instantiation TU includes this header and instantiates one run_fwd<...>.
#pragma once

#include "ampere/fwd_path.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd(const FwdParams& params, cudaStream_t stream) {
  check_head_dim("run_fwd", kHeadDim, params.head_dim);
  ampere::run_fwd_path<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(params, stream);
}

}  // namespace flashbuild
