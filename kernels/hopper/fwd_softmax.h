// Online softmax on wgmma accumulators, in registers, with exp2: each consumer thread holds two
// query rows of its warpgroup's S tile (rows lane / 4 and lane / 4 + 8 of its warp's 16), spread
// over the four threads of a quad. Row sums stay per thread until the end (only the maxima need a
// quad exchange per step).
#pragma once

#include "hopper/accumulator.h"

namespace flashbuild::hopper {

// kMaxChains: a row's max over the step's columns taken in that many independent chains (column c in chain
// c % kMaxChains, the chains' maxima then combined): the same value (max is exact), a shorter dependent FMNMX chain
// between a row's scores and its exponentials. The mainloop picks it per kernel (FwdMainloop::kMaxChains).
template <int kRows, int kMaxChains = 1>
struct OnlineSoftmax {
  float row_max[kRows];  // raw scores (before scale_log2); -inf while a row has seen no key
  float row_sum[kRows];  // this thread's share of sum(exp2(s * scale_log2 - max * scale_log2))
  float scale_log2;

  CUTE_DEVICE explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // A row that has seen no key yet has max -inf; exponents are taken against 0 instead, so that
  // its masked scores give exp2(-inf) = 0 rather than NaN.
  CUTE_DEVICE float max_scaled(int r) const { return row_max[r] == -INFINITY ? 0.f : row_max[r] * scale_log2; }

  // s (rows, cols) := exp2(s * scale_log2 - new max); row_scale[r] is what O's row r must be
  // multiplied by (the old max's weight against the new one): 1 for the first tile.
  template <bool kFirst, class Tensor>
  CUTE_DEVICE void step(Tensor& s, float (&row_scale)[kRows]) {
    static_assert(decltype(size<0>(s))::value == kRows, "rows of S and of the softmax state differ");
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float m = row_max[r];
      if constexpr (kMaxChains == 1) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(s); ++c) { m = fmaxf(m, s(r, c)); }
      } else {
        float chain[kMaxChains];
        CUTE_UNROLL
        for (int j = 0; j < kMaxChains; ++j) { chain[j] = m; }
        CUTE_UNROLL
        for (int c = 0; c < size<1>(s); ++c) { chain[c % kMaxChains] = fmaxf(chain[c % kMaxChains], s(r, c)); }
        m = chain[0];
        CUTE_UNROLL
        for (int j = 1; j < kMaxChains; ++j) { m = fmaxf(m, chain[j]); }
      }
      m = quad_max(m);
      // The old max in log2 units, -inf while the row has seen no key (not max_scaled's 0).
      const float old_scaled = row_max[r] * scale_log2;
      row_max[r] = m;
      const float new_scaled = max_scaled(r);
      float sum = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s); ++c) {
        s(r, c) = exp2_ftz(fmaf(s(r, c), scale_log2, -new_scaled));
        sum += s(r, c);
      }
      if constexpr (kFirst) {
        row_scale[r] = 1.f;
        row_sum[r] = sum;
      } else {
        // exp2 of (old max - new max) <= 0. A row that saw no key before has nothing to rescale
        // (sum 0, O 0): its old max is -inf, so its scale is exp2(-inf) = 0. (Taking the old max as
        // max_scaled's 0 gave exp2(0 - new max): +inf once the new max is below -128 in log2 units,
        // and 0 * inf = NaN in its sum and O. A select on "had keys" fixed that too, but measured
        // slower: benchmarks/fwd_softmax_rescale.)
        row_scale[r] = exp2_ftz(old_scaled - new_scaled);
        row_sum[r] = fmaf(row_sum[r], row_scale[r], sum);
      }
    }
  }

  // O's rows times row_scale (o in the same row/col view).
  template <class Tensor>
  CUTE_DEVICE static void rescale(Tensor& o, float const (&row_scale)[kRows]) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) { o(r, c) *= row_scale[r]; }
    }
  }

  // O /= the row sums; returns each row's LSE in natural-log units (scale: the softmax scale of
  // the raw scores). A row that saw no key outputs 0 with LSE +inf.
  template <class Tensor>
  CUTE_DEVICE void finalize(Tensor& o, float scale, float (&lse)[kRows]) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = sum == 0.f;
      const float inv = empty ? 0.f : 1.f / sum;
      lse[r] = empty ? INFINITY : row_max[r] * scale + __logf(sum);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) { o(r, c) *= inv; }
    }
  }
};

}  // namespace flashbuild::hopper
