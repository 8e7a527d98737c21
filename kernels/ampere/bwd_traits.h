// Tile shapes, shared-memory layouts and MMA/copy types of the Ampere-path backward kernel.
#pragma once

#include "ampere/utils.h"

namespace flashbuild::ampere {

struct BwdTile {
  int block_m;  // query rows per inner step
  int block_n;  // key rows per CTA (dK and dV stay in registers for these)
  int warps;
};

// dK and dV accumulators cost 2 * block_n * head_dim / threads registers for the whole kernel, so
// large head dims take half the key rows.
constexpr BwdTile bwd_tile(int arch, int head_dim, bool causal) {
  (void)arch;
  (void)causal;
#if defined(FLASHBUILD_BWD_BLOCK_M) && defined(FLASHBUILD_BWD_BLOCK_N)
  (void)head_dim;
  return {FLASHBUILD_BWD_BLOCK_M, FLASHBUILD_BWD_BLOCK_N, 8};
#endif
  if (head_dim <= 128) return {64, 128, 8};
  return {64, 64, 8};
}

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, class Element_>
struct BwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;

  static_assert(kNWarps == 8, "the backward warp layouts below are written for 8 warps");
  static_assert(kHeadDim % 32 == 0, "head dim must be a multiple of 32 (the binding pads to a kernel size)");
  static_assert(kBlockM % 64 == 0 && kBlockN % 64 == 0, "backward blocks must be multiples of 64 rows");

  using MmaOp = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                   SM80_16x8x16_F32F16F16F32_TN, SM80_16x8x16_F32BF16BF16F32_TN>;
  using Atom = MMA_Atom<MmaOp>;
  // S = Q K^T and dP = dO V^T over (block_m, block_n): warps 2 (rows) x 4 (cols).
  using TiledMmaSdP = TiledMMA<Atom, Layout<Shape<_2, _4, _1>>, Tile<_32, _64, _16>>;
  // dV = P^T dO and dK = dS^T Q over (block_n, head_dim): warps 4 x 2.
  using TiledMmadKV = TiledMMA<Atom, Layout<Shape<_4, _2, _1>>, Tile<_64, _32, _16>>;
  // dQ = dS K over (block_m, head_dim): warps 4 x 2.
  using TiledMmadQ = TiledMMA<Atom, Layout<Shape<_4, _2, _1>>, Tile<_64, _32, _16>>;

  template <int kRowElems>
  using SwizzledAtom = decltype(composition(Swizzle<kRowElems == 64 ? 3 : 2, 3, 3>{},
                                            Layout<Shape<_8, Int<kRowElems>>, Stride<Int<kRowElems>, _1>>{}));
  static constexpr int kHeadRowElems = kHeadDim % 64 == 0 ? 64 : 32;
  using SmemLayoutQdO = decltype(tile_to_shape(SwizzledAtom<kHeadRowElems>{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SwizzledAtom<kHeadRowElems>{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutPdS = decltype(tile_to_shape(SwizzledAtom<64>{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  // Transposed views over the same bytes, for the operands read "the other way" (ldmatrix.trans).
  using SmemLayoutQdOt = decltype(composition(SmemLayoutQdO{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, GenRowMajor{})));
  using SmemLayoutKt = decltype(composition(SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutPdSt = decltype(composition(SmemLayoutPdS{}, make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, GenRowMajor{})));

  static constexpr int kSmemQdOBytes = int(size(SmemLayoutQdO{})) * int(sizeof(Element));
  static constexpr int kSmemKVBytes = int(size(SmemLayoutKV{})) * int(sizeof(Element));
  static constexpr int kSmemPdSBytes = int(size(SmemLayoutPdS{})) * int(sizeof(Element));
  static constexpr int kSmemRowStatBytes = 2 * kBlockM * int(sizeof(float));  // LSE and dsum rows
  static constexpr int kSmemBytes = 2 * kSmemKVBytes + 2 * kSmemQdOBytes + 2 * kSmemPdSBytes + kSmemRowStatBytes;

  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  using SmemCopyAtomStore = Copy_Atom<UniversalCopy<uint32_t>, Element>;

  static constexpr int kGmemElemsPerAccess = 16 / int(sizeof(Element));
  static constexpr int kGmemThreadsPerRow = kHeadRowElems / kGmemElemsPerAccess;
  using GmemThreadLayout = Layout<Shape<Int<kNThreads / kGmemThreadsPerRow>, Int<kGmemThreadsPerRow>>,
                                  Stride<Int<kGmemThreadsPerRow>, _1>>;
  using GmemValueLayout = Layout<Shape<_1, Int<kGmemElemsPerAccess>>>;
  using GmemTiledCopy = decltype(make_tiled_copy(
      Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{}, GmemThreadLayout{}, GmemValueLayout{}));
  using GmemTiledCopyStore = decltype(make_tiled_copy(
      Copy_Atom<UniversalCopy<cute::uint128_t>, Element>{}, GmemThreadLayout{}, GmemValueLayout{}));
};

}  // namespace flashbuild::ampere
