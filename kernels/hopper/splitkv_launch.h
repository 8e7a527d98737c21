// run_splitkv for sm90 TUs at head dims 32-128: decoding over a KV cache on the Hopper forward kernel,
// compiled for it (kSplitKVKernel, hopper/fwd_params.h: its own 64-row tile, SplitKVTraits; the cache's
// addressing; a slice of the keys per tile; fp32 partials with more than one split). Around it, as on
// the Ampere path (ampere/splitkv_launch.h): the append kernel when the call adds keys, the combine
// kernel when it splits them. Head dims 192 and 256 keep the Ampere path's split-KV (their Hopper key
// blocks, 96 and 80 rows, do not divide the page sizes the binding accepts).
// Like the forward's launch (hopper/fwd_launch.h), this TU holds host code and the small kernels; the
// Hopper kernel compiles device-only in <variant>_kernel.cu and the launch reaches it through
// FwdKernelEntry.
#pragma once

#include "ampere/splitkv_steps.h"  // the checks, the append and combine kernels
#include "hopper/fwd_launch.h"  // launch_fwd, can_run; SplitKVTraits and kSplitKVKernel (fwd_params.h)

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_splitkv(const FwdParams& params, cudaStream_t stream) {
  static_assert(kArch >= 90 && hopper::serves_head_dim(kHeadDim) && hopper_splitkv_head_dim(kHeadDim),
                "an sm90 split-KV TU of a head dim whose Hopper split-KV key block divides the page sizes");
  using Element = typename hopper::ElementOf<kDType>::type;
  using Traits = hopper::SplitKVTraits<kHeadDim, kDType>;

  if (!ampere::splitkv_begin<Element>(params, kHeadDim, stream)) { return; }
  if (params.block_table && params.page_size % Traits::kBlockN != 0) {
    throw std::runtime_error("flashbuild: the Hopper split-KV takes a paged KV cache whose page size is a multiple "
                             "of " + std::to_string(Traits::kBlockN) + " rows (got " + std::to_string(params.page_size) +
                             "); flash_attn_with_kvcache checks this before");
  }
  if (!hopper::can_run(params, kHeadDim, sizeof(Element))) {
    throw std::runtime_error("flashbuild: the Hopper split-KV cannot take this call: it needs a cache with rows "
                             "(seqlen_k > 0) and q, k_cache, v_cache, out whose pointers and strides are multiples of "
                             "16 bytes; the Python API copies misaligned tensors and answers calls on an empty cache "
                             "itself, so call run_splitkv the way it does (kernels/binding/flash_api.cpp)");
  }
  hopper::launch_fwd<Traits, kIsCausal, kFeatures | hopper::kSplitKVKernel>(params, stream);
  ampere::splitkv_end<kHeadDim, Element>(params, stream);
}

}  // namespace flashbuild
