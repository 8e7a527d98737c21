// Online softmax on wgmma accumulators, in registers, with exp2: each consumer thread holds two
// query rows of its warpgroup's S tile (rows lane / 4 and lane / 4 + 8 of its warp's 16), spread
// over the four threads of a quad. Row sums stay per thread until the end (only the maxima need a
// quad exchange per step).
#pragma once

#include "hopper/sm90.h"

namespace flashbuild::hopper {

// A consumer thread's wgmma accumulator of a (64 x kN) product per warpgroup: ((2 columns, 2 rows 8
// apart, kN / 8 column groups), MMA_M, MMA_N), one wgmma per warpgroup in M and in N. It is the shape
// partition_fragment_C gives for such tiles, written out: deriving it (and accumulator_coords' layouts)
// through a TiledMMA's thread-value layouts is a large share of a kernel TU's compile, and does not change
// the code (benchmarks/edit_loop/README.md).
template <int kN>
using AccumulatorShape = Shape<Shape<_2, _2, Int<kN / 8>>, _1, _1>;

// The (row, col) in the tile of each value of that accumulator, for the thread at thr_vmnk (the
// TiledMMA's get_thr_layout_vmnk().get_flat_coord(thread index)) of kWarpgroups warpgroups stacked in
// M, each row of them kWarpgroupsN wide in N (kN columns each): thr_mma.partition_C(
// make_identity_tensor(tile)), with its layouts written out. Thread: lane % 4 -> 2 columns, lane / 4
// -> a row, warp -> 16 rows, warpgroup -> 64 rows (in M) or kN columns (in N); value: the column
// pair, row + 8, the 8-column group.
template <int kN, int kWarpgroups, int kWarpgroupsN = 1, class ThrVMNK>
CUTE_DEVICE auto accumulator_coords(ThrVMNK const& thr_vmnk) {
  // With one warpgroup in N its stride is _0, as before N could hold more (the same type).
  using WarpgroupStrideN = conditional_t<kWarpgroupsN == 1, _0, ScaledBasis<Int<kN>, 1>>;
  using ThreadCoords = Layout<Shape<Shape<_4, _8, _4>, Shape<Int<kWarpgroups>, Int<kWarpgroupsN>>>,
                              Stride<Stride<ScaledBasis<_2, 1>, ScaledBasis<_1, 0>, ScaledBasis<_16, 0>>,
                                     Stride<ScaledBasis<_64, 0>, WarpgroupStrideN>>>;
  using ValueCoords = Layout<AccumulatorShape<kN>,
                             Stride<Stride<ScaledBasis<_1, 1>, ScaledBasis<_8, 0>, ScaledBasis<_8, 1>>, _0, _0>>;
  const auto thread = ThreadCoords{}(make_coord(get<0>(thr_vmnk), make_coord(get<1>(thr_vmnk), get<2>(thr_vmnk))));
  return make_tensor(make_inttuple_iter(thread), ValueCoords{});
}

// A wgmma accumulator fragment is ((2 cols, 2 rows 8 apart, N/8 column groups), MMA_M, MMA_N).
// Softmax works on rows: view it as (rows = (2, MMA_M), cols = (2, N/8, MMA_N)).
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_rowcol(Layout const& acc) {
  static_assert(decltype(rank(acc))::value == 3, "expects (MMA, MMA_M, MMA_N)");
  static_assert(decltype(rank<0>(acc))::value == 3, "expects a wgmma accumulator ((2, 2, N/8), M, N)");
  static_assert(decltype(size<0, 0>(acc))::value == 2 && decltype(size<0, 1>(acc))::value == 2,
                "expects a wgmma accumulator ((2, 2, N/8), M, N)");
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)),
                     make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)));
}

// The S accumulator of m64nNk16 and the register A operand of m64nXk16 place a thread's values on
// the same rows and columns, 16 columns (two 8-column groups) per K step: regroup
// ((2, 2, N/8), M, N') into ((2, 2, 2), M, N/16 * N'), so that P feeds O += P V from registers.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_to_a_operand(Layout const& acc) {
  static_assert(decltype(size<0, 2>(acc))::value % 2 == 0, "P·V needs whole 16-column K steps");
  auto l = logical_divide(get<0>(acc), Shape<Underscore, Underscore, _2>{});  // (2, 2, (2, N/16))
  return make_layout(make_layout(get<0>(l), get<1>(l), get<2, 0>(l)), get<1>(acc),
                     coalesce(make_layout(get<2, 1>(l), get<2>(acc))));
}

template <int kRows>
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
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s); ++c) { m = fmaxf(m, s(r, c)); }
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
