// A wgmma accumulator as a consumer thread holds it, for both Hopper kernels: its shape, the (row, col) of each
// of its values in the tile, its row/column view (what a softmax or a row-wise epilogue walks) and its
// regrouping as the register A operand of the next product.
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

}  // namespace flashbuild::hopper
