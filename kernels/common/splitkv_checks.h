// The host-side checks of a split-KV call, without its kernels: both families' launches take them
// (common/splitkv_steps.h around the append and combine kernels; hopper/splitkv_launch.h, whose TUs reach
// those kernels through hopper/splitkv_small_kernels.h).
#pragma once

#include <stdexcept>
#include <string>

#include "common/launch.h"  // check_head_dim
#include "common/params.h"
#include "common/splitkv_heuristic.h"  // kMaxSplits

namespace flashbuild {

// The checks; returns whether the call has batch rows (to append to, or to attend).
inline bool splitkv_checks(const FwdParams& params, int head_dim) {
  check_head_dim("run_splitkv", head_dim, params.head_dim);
  if (params.num_splits < 1 || params.num_splits > kMaxSplits) {
    throw std::runtime_error("flashbuild: run_splitkv needs 1.." + std::to_string(kMaxSplits) + " splits, got " +
                             std::to_string(params.num_splits));
  }
  return params.batch != 0;
}

// Whether the attention kernel has rows to compute. Asked after the append: new keys go into the cache
// even when no query row attends to them (seqlen_q = 0).
inline bool splitkv_has_rows(const FwdParams& params) { return params.seqlen_q != 0 && params.nheads != 0; }

}  // namespace flashbuild
