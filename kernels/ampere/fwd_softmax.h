// Online softmax over the key blocks of one query block (the FlashAttention recurrence): keep each
// row's running max and sum, rescale the output accumulator whenever the max grows, normalise once
// at the end. Everything runs in the exp2 domain with the scale folded into one FMA.
#pragma once

#include "ampere/utils.h"

namespace flashbuild::ampere {

template <int kRows>
struct OnlineSoftmax {
  float row_max[kRows];
  float row_sum[kRows];  // per-thread partial sums; the quad reduction happens once, in finalize

  CUTE_DEVICE OnlineSoftmax() {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // Turns the scores acc_s into unnormalised probabilities and rescales acc_o to the new maxima.
  template <class AccS, class AccO>
  CUTE_DEVICE void update(AccS& acc_s, AccO& acc_o, float scale_log2) {
    Tensor s = make_tensor(acc_s.data(), acc_to_rowcol(acc_s.layout()));
    Tensor o = make_tensor(acc_o.data(), acc_to_rowcol(acc_o.layout()));
    static_assert(decltype(size<0>(s))::value == kRows, "row count mismatch");
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float m = row_max[r];
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s); ++c) { m = fmaxf(m, s(r, c)); }
      m = quad_max(m);
      // A row that has seen only masked keys keeps max -inf; exponentiate against 0 instead so
      // that no -inf - -inf = NaN appears. Its probabilities are exp2(-inf) = 0.
      const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
      const float correction = exp2_ftz(row_max[r] * scale_log2 - m_scaled);
      row_max[r] = m;
      row_sum[r] *= correction;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) { o(r, c) *= correction; }
      float sum = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s); ++c) {
        s(r, c) = exp2_ftz(s(r, c) * scale_log2 - m_scaled);
        sum += s(r, c);
      }
      row_sum[r] += sum;
    }
  }

  // Normalises acc_o and returns each row's natural-log LSE in lse (+inf for a row that saw no key;
  // its output is 0).
  template <class AccO>
  CUTE_DEVICE void finalize(AccO& acc_o, float softmax_scale, float (&lse)[kRows]) {
    Tensor o = make_tensor(acc_o.data(), acc_to_rowcol(acc_o.layout()));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = sum == 0.f || sum != sum;
      const float inv_sum = empty ? 0.f : 1.f / sum;
      lse[r] = empty ? INFINITY : row_max[r] * softmax_scale + logf(sum);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) { o(r, c) *= inv_sum; }
    }
  }
};

}  // namespace flashbuild::ampere
