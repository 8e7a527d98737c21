// run_splitkv for sm90 TUs at head dims 32-128: decoding over a KV cache on the Hopper forward kernel,
// compiled for it (kSplitKVKernel, hopper/fwd_params.h: its own 64-row tile, SplitKVTraits; the cache's
// addressing; a slice of the keys per tile; fp32 partials with more than one split). Around it, as on
// the Ampere path (ampere/splitkv_launch.h): the index check and append kernels when the call adds keys,
// the combine kernel when it splits them. A plain decoding call is one launch: the attention kernel checks
// the caller's indices where it reads them (CacheIndexCheck::at_read) and merges its splits itself
// (FwdParams::split_counters), launched as a programmatic dependent launch (FwdParams::dependent_launch:
// hopper/splitkv_dependent_launch.h); the binding sets all three (kernels/binding/flash_api.cpp, mha_fwd_kvcache).
// A call of at most kDecodeTileRows query rows a block at head dims 64 and 128 runs the decode tile instead
// (hopper/splitkv_decode_traits.h: keys in wgmma's M; FLASHBUILD_SPLITKV_TILE picks per call, splitkv_decode_launch.h).
// Head dims 192 and 256 keep the Ampere path's split-KV (their Hopper key blocks, 96 and 80 rows, do not divide the
// page sizes the binding accepts).
// Like the forward's launch (hopper/fwd_launch.h), this header holds host code alone: the Hopper kernel
// compiles device-only in <variant>_kernel.cu and the launch reaches it through FwdKernelEntry; the append
// and combine kernels compile in one TU of the head dim and dtype (SplitKVSmallKernels, below).
#pragma once

#include "common/splitkv_checks.h"
#include "hopper/fwd_launch.h"  // launch_fwd, can_run; SplitKVTraits and kSplitKVKernel (fwd_params.h)
#include "hopper/splitkv_decode_launch.h"  // the decode tile: launch_decode_tile, use_decode_tile

namespace flashbuild {
namespace hopper {

// The index check (common/cache_index_check.h), the append kernel (the call adds keys) and the combine kernel
// (more than one split), the same as the Ampere path's (common/).
// Declared here, defined in hopper/splitkv_small_kernels.h: one TU of the build's variants of this head dim and dtype
// instantiates them (that header says why), and the others' launches link to it.
template <int kHeadDim, class Element>
struct SplitKVSmallKernels {
  static void check_indices(const FwdParams& params, cudaStream_t stream);
  static void append(const FwdParams& params, cudaStream_t stream);
  static void combine(const FwdParams& params, cudaStream_t stream);
};

}  // namespace hopper

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_splitkv(const FwdParams& params, cudaStream_t stream) {
  static_assert(kArch >= 90 && hopper::serves_head_dim(kHeadDim) && hopper_splitkv_head_dim(kHeadDim),
                "an sm90 split-KV TU of a head dim whose Hopper split-KV key block divides the page sizes");
  using Element = typename hopper::ElementOf<kDType>::type;
  using Traits = hopper::SplitKVTraits<kHeadDim, kDType>;
  using SmallKernels = hopper::SplitKVSmallKernels<kHeadDim, Element>;

  if (!splitkv_checks(params, kHeadDim)) { return; }
  if (params.index_check.at_read && params.knew != nullptr) {
    throw std::runtime_error("flashbuild: a split-KV call that appends keys needs the index check kernel (the append "
                             "kernel reads the checked indices); the binding sets index_check.at_read only without k/v");
  }
  SmallKernels::check_indices(params, stream);  // first: every later kernel reads the checked indices (none: at_read)
  if (params.knew != nullptr) { SmallKernels::append(params, stream); }
  if (!splitkv_has_rows(params)) { return; }
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
  // The decode tile (hopper/splitkv_decode_traits.h) where it serves the call and is chosen, else the 64-row tile.
  bool decode = false;
  if constexpr (hopper::decode_tile_head_dim(kHeadDim)) { decode = hopper::use_decode_tile(params); }
  // Two K/V heads a CTA where the call qualifies (hopper/splitkv_decode_launch.h): one split, the kernel stores O and
  // the LSE itself, so nothing follows.
  if constexpr (hopper::kPairsVariant<kHeadDim, kIsCausal, kFeatures>) {
    if (decode && hopper::launch_decode_pairs<kDType>(params, stream)) { return; }
  }
  bool merged = false;  // the decode tile merged the splits in a cluster: no partials for the combine kernel
  if (decode) {
    if constexpr (hopper::decode_tile_head_dim(kHeadDim)) {
      merged = hopper::launch_decode_tile<kHeadDim, kDType, kIsCausal, kFeatures | hopper::kSplitKVKernel>(params,
                                                                                                         stream);
    }
  } else if (params.split_merge == SplitMerge::kCluster) {  // the 64-row tile merges through L2 (kLanes)
    FwdParams lanes = params;
    lanes.split_merge = SplitMerge::kLanes;
    hopper::launch_fwd<Traits, kIsCausal, kFeatures | hopper::kSplitKVKernel>(lanes, stream);
  } else {
    hopper::launch_fwd<Traits, kIsCausal, kFeatures | hopper::kSplitKVKernel>(params, stream);
  }
  // With split_counters the kernel merged the splits itself (FwdEpilogue::combine_if_last), as it does in a cluster
  // (which needs no counters: a call with more query blocks than counters, tests/gpu/test_kvcache_one_launch_gpu.py).
  if (params.num_splits > 1 && params.split_counters == nullptr && !merged) { SmallKernels::combine(params, stream); }
}

}  // namespace flashbuild
