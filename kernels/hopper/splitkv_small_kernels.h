// The split-KV's small kernels on the Hopper family: the index check, the append and combine kernels (both families',
// common/splitkv_steps.h) behind SplitKVSmallKernels (hopper/splitkv_launch.h declares it).
//
// Every split-KV variant of one head dim and dtype launches the same two kernels: compiled in each of their
// TUs, they were compiled up to four times over (device code, and the headers parsed again for it). So one TU
// of the group includes this header and instantiates SplitKVSmallKernels (the build picks it: the group's first
// variant, templates/splitkv_instantiate.cu.j2); the others include none of the kernels' code, are host code
// alone, and link to that TU's launches (each launch <<<>>>es its kernel in the TU that compiled it).
#pragma once

#include "common/splitkv_steps.h"
#include "hopper/splitkv_launch.h"

namespace flashbuild::hopper {

template <int kHeadDim, class Element>
void SplitKVSmallKernels<kHeadDim, Element>::check_indices(const FwdParams& params, cudaStream_t stream) {
  run_cache_index_check(params, stream);
}

template <int kHeadDim, class Element>
void SplitKVSmallKernels<kHeadDim, Element>::append(const FwdParams& params, cudaStream_t stream) {
  run_append_kv<Element>(params, stream);
}

template <int kHeadDim, class Element>
void SplitKVSmallKernels<kHeadDim, Element>::combine(const FwdParams& params, cudaStream_t stream) {
  splitkv_end<kHeadDim, Element>(params, stream);
}

}  // namespace flashbuild::hopper
