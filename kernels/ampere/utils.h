// Small device helpers shared by the Ampere-path kernels: fragment layout views, register-level GEMM
// loops, predicated tile copies, the arch's shared memory. What the Hopper family uses too (element types,
// exp2, fragment conversion, quad reductions, launches) is in common/numeric.h and common/launch.h.
#pragma once

#include <cute/tensor.hpp>

#include "common/launch.h"
#include "common/numeric.h"

namespace flashbuild::ampere {

using namespace cute;

// Spelled ampere::ElementOf by the launch headers and the generated TUs.
using flashbuild::ElementOf;

// Opt-in shared memory per block: 227 KB on sm90, 163 KB on sm80 (sm86/sm89: 99 KB).
constexpr int max_smem_bytes(int arch) { return arch >= 90 ? 227 * 1024 : (arch == 80 ? 163 * 1024 : 99 * 1024); }

// An SM80 16x8 accumulator fragment has layout ((2 cols, 2 rows 8 apart), MMA_M, MMA_N).
// Softmax works on rows, so view it as (rows = (2, MMA_M), cols = (2, MMA_N)).
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_to_rowcol(Layout const& acc) {
  static_assert(decltype(size<0>(acc))::value == 4, "expects an SM80 16x8 accumulator fragment");
  static_assert(decltype(rank(acc))::value == 3, "expects (MMA, MMA_M, MMA_N)");
  auto l = logical_divide(acc, Shape<_2>{});
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<2>(l)));
}

// The accumulators of two neighbouring 16x8 tiles hold exactly the register A operand of one
// 16x8x16 MMA: ((2,2),MMA_M,MMA_N) -> ((2,2,2),MMA_M,MMA_N/2). This lets P = softmax(S) feed the
// P·V product straight from registers.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_to_a_operand(Layout const& acc) {
  static_assert(decltype(size<0>(acc))::value == 4, "expects an SM80 16x8 accumulator fragment");
  static_assert(decltype(size<2>(acc))::value % 2 == 0, "P·V needs an even number of 8-wide tiles");
  auto l = logical_divide(acc, Shape<Underscore, Underscore, _2>{});
  return make_layout(make_layout(get<0>(l), get<2, 0>(l)), get<1>(l), get<2, 1>(l));
}

// acc += A·B^T with both operands in shared memory. The next k-slice is loaded into registers
// (ldmatrix) while the tensor cores work on the current one. after_step(k) runs after the MMAs of
// k-slice k are issued: work to interleave with the product (e.g. global stores).
template <class Acc, class RegA, class RegB, class SmemA, class SmemB, class TiledMma,
          class CopyA, class CopyB, class ThrCopyA, class ThrCopyB, class AfterStep>
CUTE_DEVICE void gemm_smem_smem(Acc& acc, RegA& tCrA, RegB& tCrB, SmemA const& tCsA, SmemB const& tCsB,
                                TiledMma const& mma, CopyA const& copy_a, CopyB const& copy_b,
                                ThrCopyA const& thr_copy_a, ThrCopyB const& thr_copy_b, AfterStep&& after_step) {
  Tensor tCrA_view = thr_copy_a.retile_D(tCrA);
  Tensor tCrB_view = thr_copy_b.retile_D(tCrB);
  CUTE_STATIC_ASSERT_V(size<1>(tCsA) == size<1>(tCrA_view));
  CUTE_STATIC_ASSERT_V(size<1>(tCsB) == size<1>(tCrB_view));
  copy(copy_a, tCsA(_, _, _0{}), tCrA_view(_, _, _0{}));
  copy(copy_b, tCsB(_, _, _0{}), tCrB_view(_, _, _0{}));
  CUTE_UNROLL
  for (int k = 0; k < size<2>(tCrA); ++k) {
    if (k < size<2>(tCrA) - 1) {
      copy(copy_a, tCsA(_, _, k + 1), tCrA_view(_, _, k + 1));
      copy(copy_b, tCsB(_, _, k + 1), tCrB_view(_, _, k + 1));
    }
    gemm(mma, tCrA(_, _, k), tCrB(_, _, k), acc);
    after_step(k);
  }
}

template <class Acc, class RegA, class RegB, class SmemA, class SmemB, class TiledMma,
          class CopyA, class CopyB, class ThrCopyA, class ThrCopyB>
CUTE_DEVICE void gemm_smem_smem(Acc& acc, RegA& tCrA, RegB& tCrB, SmemA const& tCsA, SmemB const& tCsB,
                                TiledMma const& mma, CopyA const& copy_a, CopyB const& copy_b,
                                ThrCopyA const& thr_copy_a, ThrCopyB const& thr_copy_b) {
  gemm_smem_smem(acc, tCrA, tCrB, tCsA, tCsB, mma, copy_a, copy_b, thr_copy_a, thr_copy_b, [](int) {});
}

// acc += A·B^T with A already in registers (the softmax probabilities) and B in shared memory.
template <class Acc, class RegA, class RegB, class SmemB, class TiledMma, class CopyB, class ThrCopyB>
CUTE_DEVICE void gemm_reg_smem(Acc& acc, RegA const& tCrA, RegB& tCrB, SmemB const& tCsB,
                               TiledMma const& mma, CopyB const& copy_b, ThrCopyB const& thr_copy_b) {
  Tensor tCrB_view = thr_copy_b.retile_D(tCrB);
  CUTE_STATIC_ASSERT_V(size<1>(tCsB) == size<1>(tCrB_view));
  copy(copy_b, tCsB(_, _, _0{}), tCrB_view(_, _, _0{}));
  CUTE_UNROLL
  for (int k = 0; k < size<2>(tCrA); ++k) {
    if (k < size<2>(tCrA) - 1) { copy(copy_b, tCsB(_, _, k + 1), tCrB_view(_, _, k + 1)); }
    gemm(mma, tCrA(_, _, k), tCrB(_, _, k), acc);
  }
}

// Copies a (CPY, rows, cols) partition row by row; rows at or past `row_limit` (as told by the
// identity-tensor partition `coord`) are zero-filled instead, so that padding rows of a tile can
// never inject NaN or Inf into the products. With GmemRowCopies' LoadZeroFill every vector is one
// cp.async, and a row past the limit reads 0 bytes and lands as zeros; with Load such a row is
// cleared by shared-memory stores, behind a branch per row.
template <class TiledCopy, class Src, class Dst, class Coord>
CUTE_DEVICE void copy_rows(TiledCopy const& tiled_copy, Src const& src, Dst& dst, Coord const& coord,
                           int row_limit) {
  constexpr bool kZeroFills =
      std::is_same_v<typename TiledCopy::Traits, Copy_Traits<SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<cute::uint128_t>>>;
  CUTE_UNROLL
  for (int m = 0; m < size<1>(dst); ++m) {
    const bool valid = get<0>(coord(0, m, 0)) < row_limit;
    if constexpr (kZeroFills) {
      copy(tiled_copy.with(valid), src(_, m, _), dst(_, m, _));
    } else if (valid) {
      copy(tiled_copy, src(_, m, _), dst(_, m, _));
    } else {
      clear(dst(_, m, _));
    }
  }
}

// Shared-memory rows of kRowElems (64 or 32) elements, XOR-swizzled in 16-byte chunks so that
// ldmatrix reads of 8 consecutive rows hit 8 different bank groups.
template <int kRowElems>
using SwizzledRows = decltype(composition(Swizzle<kRowElems == 64 ? 3 : 2, 3, 3>{},
                                          Layout<Shape<_8, Int<kRowElems>>, Stride<Int<kRowElems>, _1>>{}));

// Global <-> shared copies of such rows: 16 bytes per thread per access, a warp covering whole
// 128-byte rows. Load and LoadZeroFill are asynchronous (cp.async; the second zero-fills where its
// predicate is false, see copy_rows), Store a plain vector store. Which load a kernel uses is
// measured: it moves the register allocation of kernels at the 255-register limit
// (benchmarks/zero_fill/).
template <class Element, int kNThreads, int kRowElems>
struct GmemRowCopies {
  static constexpr int kElemsPerAccess = 16 / int(sizeof(Element));
  static constexpr int kThreadsPerRow = kRowElems / kElemsPerAccess;
  static_assert(kNThreads % kThreadsPerRow == 0, "threads must tile whole rows");
  using ThreadLayout = Layout<Shape<Int<kNThreads / kThreadsPerRow>, Int<kThreadsPerRow>>, Stride<Int<kThreadsPerRow>, _1>>;
  using ValueLayout = Layout<Shape<_1, Int<kElemsPerAccess>>>;
  using Load = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{},
                                        ThreadLayout{}, ValueLayout{}));
  using LoadZeroFill = decltype(make_tiled_copy(
      Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<cute::uint128_t>, Element>{}, ThreadLayout{}, ValueLayout{}));
  using Store = decltype(make_tiled_copy(Copy_Atom<UniversalCopy<cute::uint128_t>, Element>{}, ThreadLayout{},
                                         ValueLayout{}));
};

// One fp32 from global to shared memory, asynchronously (in the current cp.async group); zero
// when !valid, without reading src.
CUTE_DEVICE void cp_async_float(float* dst, const float* src, bool valid) {
  const uint32_t dst_addr = cast_smem_ptr_to_uint(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst_addr), "l"(src), "r"(valid ? 4 : 0));
}

// The same for stores to global memory: rows past the limit are skipped.
template <class TiledCopy, class Src, class Dst, class Coord>
CUTE_DEVICE void store_rows(TiledCopy const& tiled_copy, Src const& src, Dst& dst, Coord const& coord,
                            int row_limit) {
  CUTE_UNROLL
  for (int m = 0; m < size<1>(dst); ++m) {
    if (get<0>(coord(0, m, 0)) < row_limit) { copy(tiled_copy, src(_, m, _), dst(_, m, _)); }
  }
}

// A shared-memory tile out to a global one of the same shape, through registers with
// `tiled_copy`'s vectors; rows past row_limit are skipped.
template <class TiledCopy, class SmemTile, class GmemTile>
CUTE_DEVICE void store_tile(TiledCopy const& tiled_copy, int tidx, SmemTile const& smem_tile, GmemTile& gmem_tile,
                            int row_limit) {
  auto thr_copy = tiled_copy.get_thread_slice(tidx);
  Tensor src = thr_copy.partition_S(smem_tile);
  Tensor dst = thr_copy.partition_D(gmem_tile);
  Tensor staged = make_tensor<typename GmemTile::value_type>(shape(dst));
  copy(tiled_copy, src, staged);
  store_rows(tiled_copy, staged, dst, thr_copy.partition_D(make_identity_tensor(shape(gmem_tile))), row_limit);
}

}  // namespace flashbuild::ampere
