// The Ampere-path forward of sm90 TUs, run_fwd_ampere_path, which hopper/fwd_launch.h declares and
// routes to (tensors TMA cannot address, calls with no keys). Its own header, so the Hopper
// TU never parses or compiles the Ampere kernel: a variant's fallback TU (<variant>_fallback.cu)
// includes this header alone and instantiates it (a variant with no Hopper tile includes
// ampere/fwd_launch.h alone instead). The launch is ampere/fwd_path.h's, the one ampere/fwd_launch.h's
// run_fwd makes.
#pragma once

#include "ampere/fwd_path.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd_ampere_path(const FwdParams& params, cudaStream_t stream) {
  ampere::run_fwd_path<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(params, stream);
}

}  // namespace flashbuild
