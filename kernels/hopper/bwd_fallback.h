// The Ampere-path backward of sm90 TUs, run_bwd_ampere_path, which hopper/bwd_launch.h declares and
// routes to (the calls its Hopper kernel declines: tensors TMA cannot address, empty Q or K). Its own
// header, so the Hopper TU never parses or compiles the Ampere backward kernel: a variant's fallback
// TU (<variant>_fallback.cu) includes this header alone and instantiates it (a variant with no Hopper
// kernel of its own includes ampere/bwd_launch.h alone instead). The launches are ampere/bwd_path.h's,
// the ones ampere/bwd_launch.h's run_bwd makes.
#pragma once

#include "ampere/bwd_path.h"

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd_ampere_path(const BwdParams& params, cudaStream_t stream) {
  ampere::run_bwd_path<kArch, kHeadDim, kDType, kIsCausal, kFeatures>(params, stream);
}

}  // namespace flashbuild
