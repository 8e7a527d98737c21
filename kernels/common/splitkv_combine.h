// Merges the split-KV partial results: with per-split LSEs l_s and outputs O_s (each normalised by
// its own sum), the full LSE is l = log(sum_s exp(l_s)) and O = sum_s exp(l_s - l) * O_s.
// One warp merges one output row (combine_row): the combine kernel runs it for every row; the Hopper
// split-KV's fused combine runs it in the CTA whose split of a query block finished last
// (hopper/fwd_epilogue.h, combine_if_last), over the rows of that block.
#pragma once

#include <cmath>  // INFINITY
#include <cstdint>
#include <type_traits>  // std::conditional_t

#include <cute/config.hpp>  // CUTE_UNROLL

#include "common/launch.h"
#include "common/params.h"

namespace flashbuild {

constexpr int kCombineRowsPerBlock = 4;  // one warp per output row

// Row idx = (batch, head, row) of the (batch, nheads, seqlen_q) rows, by the 32 lanes of a warp, from its first
// num_splits slots (the fused combine's tile.splits, SplitTileScheduler: the call's num_splits). The partials
// are read through L2 (ld.global.cg): in the fused combine other CTAs of the same launch wrote them.
template <int kHeadDim, class Element>
__device__ __forceinline__ void combine_row(const FwdParams& p, int64_t idx, int lane, int num_splits) {
  static_assert(kHeadDim % 32 == 0, "each lane owns kHeadDim / 32 columns");
  constexpr int kColsPerLane = kHeadDim / 32;
  const int64_t rows = int64_t(p.batch) * p.nheads * p.seqlen_q;
  const int row = int(idx % p.seqlen_q);
  const int head = int((idx / p.seqlen_q) % p.nheads);
  const int batch = int(idx / (int64_t(p.seqlen_q) * p.nheads));

  float lse_max = -INFINITY;
  for (int s = 0; s < num_splits; ++s) { lse_max = fmaxf(lse_max, __ldcg(p.lse_accum + s * rows + idx)); }
  float sum = 0.f;
  if (lse_max != -INFINITY) {
    for (int s = 0; s < num_splits; ++s) { sum += __expf(__ldcg(p.lse_accum + s * rows + idx) - lse_max); }
  }
  const float lse = sum == 0.f ? INFINITY : lse_max + __logf(sum);  // +inf: the row saw no key

  float out[kColsPerLane] = {};
  if (sum != 0.f) {
    for (int s = 0; s < num_splits; ++s) {
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

// combine_row's merge laid out for latency, for the Hopper split-KV's fused combine (hopper/fwd_epilogue.h,
// combine_if_last, SplitMerge::kLanes), where the CTA that merges waits on it at the end of the decode: combine_row
// walks the splits in every lane, each step behind a load of that split's LSE. Here the 32 lanes load 32 splits'
// LSEs at once and share them by shuffles, the partials of kGroup splits load together (the first group before the
// LSEs are reduced: they do not depend on them), and each lane reads its kHeadDim / 32 adjacent columns as one
// vector. The caller passes the row's addresses, so no index is divided.
// The arithmetic is combine_row's, in its order, so the result is the same bit for bit: fmaxf picks the same
// maximum in any order; the sum and each column's weighted sum add in split order (one lane adds the shuffled
// terms one after the other; no tree); each term is the same expression (the same __expf of the same difference,
// the same fused multiply-add).
//   lse_row: the row's LSE in split 0 of lse_accum; splits are split_stride floats apart.
//   o_row: the row's partial output in split 0 of o_accum; splits are split_stride * kHeadDim floats apart.
//   o, lse: the row of the output and its LSE.
template <int kHeadDim, class Element>
__device__ __forceinline__ void combine_row_lanes(int num_splits, const float* lse_row, const float* o_row,
                                                  int64_t split_stride, Element* o, float* lse, int lane) {
  static_assert(kHeadDim % 32 == 0 && (kHeadDim / 32) <= 4, "each lane owns 1 to 4 adjacent columns");
  constexpr int kCols = kHeadDim / 32;
  constexpr int kGroup = kCols >= 3 ? 16 : 32;  // splits whose partials load together: 64 registers at most
  constexpr unsigned kAll = 0xffffffffu;
  // A lane's columns in one load (1, 2 or 4 floats: head dims 32, 64, 128); head dim 96's three one by one (no
  // vector of three floats, nor an alignment of three elements for the store below).
  constexpr bool kOneVector = kCols != 3;
  using Vec = std::conditional_t<kCols == 4, float4, std::conditional_t<kCols == 2, float2, float>>;
  static_assert(!kOneVector || sizeof(Vec) == kCols * sizeof(float), "one vector holds a lane's columns");
  const int64_t o_split_stride = split_stride * kHeadDim;
  o_row += lane * kCols;

  float part[kGroup][kCols];
  auto load_group = [&](int first) {
    CUTE_UNROLL
    for (int j = 0; j < kGroup; ++j) {
      if constexpr (kOneVector) {
        Vec v{};
        if (first + j < num_splits) { v = __ldcg(reinterpret_cast<const Vec*>(o_row + (first + j) * o_split_stride)); }
        CUTE_UNROLL
        for (int c = 0; c < kCols; ++c) { part[j][c] = reinterpret_cast<const float*>(&v)[c]; }
      } else {
        CUTE_UNROLL
        for (int c = 0; c < kCols; ++c) {
          part[j][c] = first + j < num_splits ? __ldcg(o_row + (first + j) * o_split_stride + c) : 0.f;
        }
      }
    }
  };
  load_group(0);

  // Lane l holds the LSE of split chunk + l; chunk 0's stays in lse0 (at most 32 splits: the usual case).
  auto lse_of = [&](int chunk) {
    return chunk + lane < num_splits ? __ldcg(lse_row + (chunk + lane) * split_stride) : -INFINITY;
  };
  const float lse0 = lse_of(0);
  float lse_max = lse0;
#pragma unroll 1  // chunks past the first: only forced split counts over 32 reach them
  for (int chunk = 32; chunk < num_splits; chunk += 32) { lse_max = fmaxf(lse_max, lse_of(chunk)); }
  CUTE_UNROLL
  for (int offset = 16; offset > 0; offset /= 2) { lse_max = fmaxf(lse_max, __shfl_xor_sync(kAll, lse_max, offset)); }

  float sum = 0.f;
  if (lse_max != -INFINITY) {
#pragma unroll 1
    for (int chunk = 0; chunk < num_splits; chunk += 32) {
      const float term = __expf((chunk == 0 ? lse0 : lse_of(chunk)) - lse_max);
      CUTE_UNROLL
      for (int j = 0; j < 32; ++j) {
        const float t = __shfl_sync(kAll, term, j);
        if (chunk + j < num_splits) { sum += t; }
      }
    }
  }
  const float lse_total = sum == 0.f ? INFINITY : lse_max + __logf(sum);  // +inf: the row saw no key

  float out[kCols] = {};
  if (sum != 0.f) {
#pragma unroll 1
    for (int chunk = 0; chunk < num_splits; chunk += 32) {
      const float weight = __expf((chunk == 0 ? lse0 : lse_of(chunk)) - lse_total);
#pragma unroll 1
      for (int first = chunk; first < chunk + 32 && first < num_splits; first += kGroup) {
        if (first != 0) { load_group(first); }
        CUTE_UNROLL
        for (int j = 0; j < kGroup; ++j) {
          const float w = __shfl_sync(kAll, weight, first - chunk + j);
          if (first + j < num_splits) {
            CUTE_UNROLL
            for (int c = 0; c < kCols; ++c) { out[c] += w * part[j][c]; }
          }
        }
      }
    }
  }
  if constexpr (kOneVector) {
    struct alignas(kCols * sizeof(Element)) Cols { Element v[kCols]; };
    Cols cols;
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) { cols.v[c] = Element(out[c]); }
    *reinterpret_cast<Cols*>(o + lane * kCols) = cols;
  } else {
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) { o[lane * kCols + c] = Element(out[c]); }
  }
  if (lane == 0) { *lse = lse_total; }
}

template <int kHeadDim, class Element>
__global__ void __launch_bounds__(32 * kCombineRowsPerBlock) splitkv_combine_kernel(const __grid_constant__ FwdParams p) {
  const int64_t rows = int64_t(p.batch) * p.nheads * p.seqlen_q;
  const int64_t idx = int64_t(blockIdx.x) * kCombineRowsPerBlock + threadIdx.x / 32;  // (batch, head, row)
  if (idx >= rows) { return; }
  combine_row<kHeadDim, Element>(p, idx, threadIdx.x % 32, p.num_splits);
}

}  // namespace flashbuild
