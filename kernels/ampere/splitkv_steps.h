// The steps of a split-KV launch around its attention kernel, the same in both families' run_splitkv
// (ampere/splitkv_launch.h, hopper/splitkv_launch.h): the checks and the append kernel before it, the
// combine kernel after it.
#pragma once

#include <stdexcept>
#include <string>

#include "ampere/append_kv.h"
#include "ampere/splitkv_combine.h"
#include "common/splitkv_heuristic.h"  // kMaxSplits

namespace flashbuild::ampere {

// The checks, then the append kernel when the call adds keys: they go into the cache even when no query
// row attends to them (seqlen_q = 0). Returns whether the attention kernel has rows to compute.
template <class Element>
bool splitkv_begin(const FwdParams& params, int head_dim, cudaStream_t stream) {
  check_head_dim("run_splitkv", head_dim, params.head_dim);
  if (params.num_splits < 1 || params.num_splits > kMaxSplits) {
    throw std::runtime_error("flashbuild: run_splitkv needs 1.." + std::to_string(kMaxSplits) + " splits, got " +
                             std::to_string(params.num_splits));
  }
  if (params.batch == 0) { return false; }
  if (params.knew != nullptr) { run_append_kv<Element>(params, stream); }
  return params.seqlen_q != 0 && params.nheads != 0;
}

// With more than one split, the combine kernel merges the splits' partial results into out and lse.
template <int kHeadDim, class Element>
void splitkv_end(const FwdParams& params, cudaStream_t stream) {
  if (params.num_splits <= 1) { return; }
  const int64_t rows = int64_t(params.batch) * params.nheads * params.seqlen_q;
  const int blocks = int((rows + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock);
  launch(&splitkv_combine_kernel<kHeadDim, Element>, dim3(blocks), 32 * kCombineRowsPerBlock, 0, stream, params);
}

}  // namespace flashbuild::ampere
