// Tile shapes, shared-memory layouts and copy/MMA types of the Ampere-path forward kernel.
#pragma once

#include "ampere/utils.h"
#include "common/splitkv_heuristic.h"  // the split-KV tile

namespace flashbuild::ampere {

struct FwdTile {
  int block_m;  // query rows per CTA
  int block_n;  // key rows per main-loop step
  int warps;
};

// Shared memory of one forward CTA: the Q tile, the K and V tiles, of 16-bit elements.
constexpr int fwd_smem_bytes(int head_dim, int block_m, int block_n) { return 2 * head_dim * (block_m + 2 * block_n); }

// The tile heuristic in one place, measured on an H200 (fp16, 16k tokens; sweeps in
// benchmarks/fwd_masked_steps/; the first sweep is fwd_tile_sweep/ in benchmarks/archive/README.md). Since the main loop runs its
// masked steps apart from the unmasked ones, 128x64 with 4 warps is the fastest tile up to hdim 128,
// causal or not (hdim 128 causal at 16k: 350 against 333 TFLOPS for 128x128/8); 128x128/4 is slower
// at hdim 64. hdim 192/256 take 16 rows per warp so that the O accumulator fits in registers:
// 128x64/8 non-causal; causal 64x64/4, two CTAs per SM, which evens out the short and long query
// blocks (hdim 256 causal against 128x64/8: +8% at 1k, +2% at 4k, -7% at 16k; hdim 192 +8% / +2% /
// -3%). Where a tile does not fit the arch's shared memory (hdim 256 on sm86/sm89), the query
// block halves. (These sweeps ran on the H200, where the Hopper family now serves every forward: no
// plan builds this kernel for sm90, and the persistent variant measured there, benchmarks/fwd_persistent/,
// is gone with it.)
// Tuning sweeps can override it for a whole build:
//   nvcc -DFLASHBUILD_FWD_BLOCK_M=128 -DFLASHBUILD_FWD_BLOCK_N=64 -DFLASHBUILD_FWD_WARPS=8
constexpr FwdTile fwd_tile(int arch, int head_dim, bool causal) {
#if defined(FLASHBUILD_FWD_BLOCK_M) && defined(FLASHBUILD_FWD_BLOCK_N) && defined(FLASHBUILD_FWD_WARPS)
  (void)arch;
  (void)head_dim;
  (void)causal;
  FwdTile tile{FLASHBUILD_FWD_BLOCK_M, FLASHBUILD_FWD_BLOCK_N, FLASHBUILD_FWD_WARPS};
#else
  FwdTile tile = head_dim <= 128 ? FwdTile{128, 64, 4} : causal ? FwdTile{64, 64, 4} : FwdTile{128, 64, 8};
  if (fwd_smem_bytes(head_dim, tile.block_m, tile.block_n) > max_smem_bytes(arch)) { tile = {64, 64, 4}; }
#endif
  return tile;
}

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, class Element_>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;

  static_assert(kHeadDim % 32 == 0, "head dim must be a multiple of 32 (the binding pads to a kernel size)");
  static_assert(kBlockM % (16 * kNWarps) == 0, "each warp owns whole 16-row MMA tiles of the query block");
  static_assert(kBlockN % 16 == 0, "key block must be a multiple of the MMA k-size (16)");

  // Warps split the query rows; every warp sees all key columns, so row reductions stay in a quad.
  using MmaOp = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                   SM80_16x8x16_F32F16F16F32_TN, SM80_16x8x16_F32BF16BF16F32_TN>;
  using TiledMma = TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<Int<kNWarps>, _1, _1>>,
                            Tile<Int<16 * kNWarps>, _16, _16>>;

  static constexpr int kSmemRowElems = kHeadDim % 64 == 0 ? 64 : 32;
  using SmemLayoutAtom = SwizzledRows<kSmemRowElems>;
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // V^T as the B operand of P·V: (head_dim, block_n) over the same bytes as V.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));

  static constexpr int kSmemQElems = int(size(SmemLayoutQ{}));
  static constexpr int kSmemQBytes = kSmemQElems * int(sizeof(Element));
  static constexpr int kSmemKVBytes = int(size(SmemLayoutKV{})) * int(sizeof(Element));
  static constexpr int kSmemBytes = kSmemQBytes + 2 * kSmemKVBytes;
  static_assert(kSmemBytes == fwd_smem_bytes(kHeadDim, kBlockM, kBlockN),
                "smem accounting (fwd_tile's heuristic)");

  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  using SmemCopyAtomO = Copy_Atom<UniversalCopy<uint32_t>, Element>;

  // Clearing loads, not zero-filling ones: those cost the hdim-128 forward 9%, though only the last
  // key block and Q use them (benchmarks/zero_fill/).
  using GmemTiledCopyQKV = typename GmemRowCopies<Element, kNThreads, kSmemRowElems>::Load;
  using GmemTiledCopyO = typename GmemRowCopies<Element, kNThreads, kSmemRowElems>::Store;
};

// The split-KV kernel's traits (ampere/splitkv_launch.h): few query rows, many keys; a 64-row query block
// (4 warps) and long key blocks keep the loads of K and V wide: memory, not the tensor cores, sets the pace.
template <int kHeadDim, DType kDType>
using SplitKVTraits = FwdTraits<kHeadDim, kSplitKVBlockM, splitkv_block_n(kHeadDim), 4, typename ElementOf<kDType>::type>;

}  // namespace flashbuild::ampere
