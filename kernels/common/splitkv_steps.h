// The steps of a split-KV launch around its attention kernel: the checks and the append kernel before it,
// the combine kernel after it. The Ampere path's run_splitkv (ampere/splitkv_launch.h) takes them here; the
// Hopper one takes the same kernels through hopper/splitkv_small_kernels.h.
#pragma once

#include "common/append_kv.h"
#include "common/cache_index_check.h"
#include "common/launch.h"
#include "common/splitkv_checks.h"
#include "common/splitkv_combine.h"

namespace flashbuild {

// The checks, the index check (every later kernel reads the checked indices), then the append kernel when
// the call adds keys: they go into the cache even when no query row attends to them (seqlen_q = 0).
// Returns whether the attention kernel has rows to compute.
template <class Element>
bool splitkv_begin(const FwdParams& params, int head_dim, cudaStream_t stream) {
  if (!splitkv_checks(params, head_dim)) { return false; }
  run_cache_index_check(params, stream);
  if (params.knew != nullptr) { run_append_kv<Element>(params, stream); }
  return splitkv_has_rows(params);
}

// With more than one split, the combine kernel merges the splits' partial results into out and lse.
template <int kHeadDim, class Element>
void splitkv_end(const FwdParams& params, cudaStream_t stream) {
  if (params.num_splits <= 1) { return; }
  const int64_t rows = int64_t(params.batch) * params.nheads * params.seqlen_q;
  const int blocks = int((rows + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock);
  launch(&splitkv_combine_kernel<kHeadDim, Element>, dim3(blocks), 32 * kCombineRowsPerBlock, 0, stream, params);
}

}  // namespace flashbuild
