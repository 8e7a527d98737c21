// Merges the split-KV partial results: with per-split LSEs l_s and outputs O_s (each normalised by
// its own sum), the full LSE is l = log(sum_s exp(l_s)) and O = sum_s exp(l_s - l) * O_s.
// One warp merges one output row (combine_row): the combine kernel runs it for every row; the Hopper
// split-KV's fused combine runs it in the CTA whose split of a query block finished last
// (hopper/fwd_epilogue.h, combine_if_last), over the rows of that block.
#pragma once

#include <cmath>  // INFINITY
#include <cstdint>

#include <cute/config.hpp>  // CUTE_UNROLL

#include "common/launch.h"
#include "common/params.h"

namespace flashbuild {

constexpr int kCombineRowsPerBlock = 4;  // one warp per output row

// Row idx = (batch, head, row) of the (batch, nheads, seqlen_q) rows, by the 32 lanes of a warp. The partials
// are read through L2 (ld.global.cg): in the fused combine other CTAs of the same launch wrote them.
template <int kHeadDim, class Element>
__device__ __forceinline__ void combine_row(const FwdParams& p, int64_t idx, int lane) {
  static_assert(kHeadDim % 32 == 0, "each lane owns kHeadDim / 32 columns");
  constexpr int kColsPerLane = kHeadDim / 32;
  const int64_t rows = int64_t(p.batch) * p.nheads * p.seqlen_q;
  const int row = int(idx % p.seqlen_q);
  const int head = int((idx / p.seqlen_q) % p.nheads);
  const int batch = int(idx / (int64_t(p.seqlen_q) * p.nheads));

  float lse_max = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) { lse_max = fmaxf(lse_max, __ldcg(p.lse_accum + s * rows + idx)); }
  float sum = 0.f;
  if (lse_max != -INFINITY) {
    for (int s = 0; s < p.num_splits; ++s) { sum += __expf(__ldcg(p.lse_accum + s * rows + idx) - lse_max); }
  }
  const float lse = sum == 0.f ? INFINITY : lse_max + __logf(sum);  // +inf: the row saw no key

  float out[kColsPerLane] = {};
  if (sum != 0.f) {
    for (int s = 0; s < p.num_splits; ++s) {
      const float weight = __expf(__ldcg(p.lse_accum + s * rows + idx) - lse);
      const float* o_split = p.o_accum + (s * rows + idx) * kHeadDim;
      CUTE_UNROLL
      for (int c = 0; c < kColsPerLane; ++c) { out[c] += weight * __ldcg(o_split + c * 32 + lane); }
    }
  }
  Element* o = static_cast<Element*>(p.o) + batch * p.o_batch_stride + row * p.o_row_stride + head * p.o_head_stride;
  CUTE_UNROLL
  for (int c = 0; c < kColsPerLane; ++c) { o[c * 32 + lane] = Element(out[c]); }
  if (lane == 0) { p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + row] = lse; }
}

template <int kHeadDim, class Element>
__global__ void __launch_bounds__(32 * kCombineRowsPerBlock) splitkv_combine_kernel(const __grid_constant__ FwdParams p) {
  const int64_t rows = int64_t(p.batch) * p.nheads * p.seqlen_q;
  const int64_t idx = int64_t(blockIdx.x) * kCombineRowsPerBlock + threadIdx.x / 32;  // (batch, head, row)
  if (idx >= rows) { return; }
  combine_row<kHeadDim, Element>(p, idx, threadIdx.x % 32);
}

}  // namespace flashbuild
