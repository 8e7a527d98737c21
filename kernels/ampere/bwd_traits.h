// Tile shapes, shared-memory layouts and MMA/copy types of the Ampere-path backward kernel.
#pragma once

#include "ampere/utils.h"  // max_smem_bytes

namespace flashbuild::ampere {

struct BwdTile {
  int block_m;  // query rows per inner step
  int block_n;  // key rows per CTA (dK and dV stay in registers for these)
  int warps;
  int stages;   // shared-memory buffers for Q/dO: 2 prefetches the next query block
};

// Shared memory of one backward CTA: K, V, `stages` x (Q, dO), P, dS and two fp32 rows stats.
constexpr int bwd_smem_bytes(int head_dim, int block_m, int block_n, int stages) {
  return 2 * (2 * block_n * head_dim + stages * 2 * block_m * head_dim + 2 * block_m * block_n) +
         stages * 2 * block_m * 4;
}

// dK and dV accumulators cost 2 * block_n * head_dim / threads registers for the whole kernel, so
// large head dims take half the key rows; small ones take twice the query rows per step, which
// halves how often K and V are read from shared memory per FLOP (hdim 64 on the H200: 229 -> 253
// TFLOPS at 16k, benchmarks/bwd_tile_sweep/). A second Q/dO stage is used whenever it fits: with
// one CTA per SM (the register file is full) nothing else hides the load latency of the next block.
// Where a tile does not fit even with one stage (sm86/sm89 have 99 KB), halve its blocks: the query
// block to 64 rows, then the key block to 64, then each to 32 (hdim 192 there: 32 x 64; hdim 256:
// 32 x 32). Tuning sweeps and checks can override it for a whole build:
//   nvcc -DFLASHBUILD_BWD_BLOCK_M=32 -DFLASHBUILD_BWD_BLOCK_N=32 [-DFLASHBUILD_BWD_STAGES=1]
constexpr BwdTile bwd_tile(int arch, int head_dim) {
#if defined(FLASHBUILD_BWD_BLOCK_M) && defined(FLASHBUILD_BWD_BLOCK_N)
  int block_m = FLASHBUILD_BWD_BLOCK_M, block_n = FLASHBUILD_BWD_BLOCK_N;
#else
  int block_m = head_dim <= 64 ? 128 : 64, block_n = head_dim <= 128 ? 128 : 64;
  while (bwd_smem_bytes(head_dim, block_m, block_n, 1) > max_smem_bytes(arch) && (block_m > 32 || block_n > 32)) {
    if (block_m > 64 || (block_n <= 64 && block_m > 32)) {
      block_m /= 2;
    } else {
      block_n /= 2;
    }
  }
#endif
#if defined(FLASHBUILD_BWD_STAGES)
  const int stages = FLASHBUILD_BWD_STAGES;
#else
  const int stages = bwd_smem_bytes(head_dim, block_m, block_n, 2) <= max_smem_bytes(arch) ? 2 : 1;
#endif
  return {block_m, block_n, 8, stages};
}

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kStages_, class Element_>
struct BwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kStages = kStages_;
  static constexpr int kNThreads = kNWarps * 32;

  static_assert(kStages == 1 || kStages == 2, "one or two Q/dO buffers");
  static_assert(kNWarps == 8, "the backward warp layouts below are written for 8 warps");
  static_assert(kHeadDim % 32 == 0, "head dim must be a multiple of 32 (the binding pads to a kernel size)");
  static_assert(kBlockM % 32 == 0 && kBlockN % 32 == 0, "backward blocks must be multiples of 32 rows");

  using MmaOp = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                   SM80_16x8x16_F32F16F16F32_TN, SM80_16x8x16_F32BF16BF16F32_TN>;
  using Atom = MMA_Atom<MmaOp>;
  // S = Q K^T and dP = dO V^T over (block_m, block_n): warps 2 (rows) x 4 (cols), 16 columns each
  // per 32 x 64 tile; a 32-key block (sm86/sm89, hdim 256) gives each warp 8, read with ldmatrix.x2.
  static constexpr int kSdPTileN = kBlockN >= 64 ? 64 : 32;
  using TiledMmaSdP = TiledMMA<Atom, Layout<Shape<_2, _4, _1>>, Tile<_32, Int<kSdPTileN>, _16>>;
  // dV = P^T dO and dK = dS^T Q over (block_n, head_dim), and dQ = dS K over (block_m, head_dim):
  // warps (rows / 32) x the rest, so that each warp's tile is 32 rows high and as square as the
  // output allows. A warp reads (tile rows + tile cols) x k operand elements from shared memory
  // per product, which is what bounds these kernels: at hdim 256, 4 x 2 warps over (64, 256)
  // would read 50% more than 2 x 4.
  // Where the columns do not divide among that many column warps (hdim 96 over 4), rows take more.
  static constexpr int row_warps(int rows, int cols) {
    int warps = std::min(rows / 32, kNWarps);
    while (cols % (16 * (kNWarps / warps)) != 0 && warps < kNWarps && rows % (32 * warps) == 0) { warps *= 2; }
    return warps;
  }
  template <int kRows, int kCols, int kRowWarps = row_warps(kRows, kCols)>
  using RowTiledMma = TiledMMA<Atom, Layout<Shape<Int<kRowWarps>, Int<kNWarps / kRowWarps>, _1>>,
                               Tile<Int<16 * kRowWarps>, Int<16 * (kNWarps / kRowWarps)>, _16>>;
  using TiledMmadKV = RowTiledMma<kBlockN, kHeadDim>;
  // dQ = dS K is computed in kDqChunks column chunks, each reduced into dq_accum during one of the
  // dV and dK products (bwd_kernel.h), so that half as many of its accumulators are live beside dK
  // and dV. At hdim 256 that takes the kernel's spill from 128 to 88 bytes, and the backward from
  // 255 to 270 TFLOPS at 16k (fp16, H200; benchmarks/bwd_dq_chunks/). At hdim 128 it adds a 68-byte spill
  // where there was none. Sweeps can override it: nvcc -DFLASHBUILD_BWD_DQ_CHUNKS=1|2.
#if defined(FLASHBUILD_BWD_DQ_CHUNKS)
  static constexpr int kDqChunks = FLASHBUILD_BWD_DQ_CHUNKS;
#else
  static constexpr int kDqChunks = kHeadDim == 256 ? 2 : 1;
#endif
  static_assert(kDqChunks == 1 || kDqChunks == 2, "dQ in one or two column chunks");
  static constexpr int kDqCols = kHeadDim / kDqChunks;
  using TiledMmadQ = RowTiledMma<kBlockM, kDqCols>;
  // Every product's tile must divide its output: CuTe would not say so, the results would be wrong.
  static_assert(kBlockM % 32 == 0 && kBlockN % kSdPTileN == 0, "S and dP tiles are 32 x 64 (or 32 x 32)");
  static_assert(kBlockN % (16 * row_warps(kBlockN, kHeadDim)) == 0 &&
                    kHeadDim % (16 * (kNWarps / row_warps(kBlockN, kHeadDim))) == 0, "dK/dV tile must divide the output");
  static_assert(kBlockM % (16 * row_warps(kBlockM, kDqCols)) == 0 &&
                    kDqCols % (16 * (kNWarps / row_warps(kBlockM, kDqCols))) == 0, "dQ tile must divide the output");

  // dq_accum's order inside a query block (BwdParams): thread t's dQ fragment elements 4g..4g+3
  // (partition_C of TiledMmadQ) at 4 * (g * kNThreads + t), so that one warp's vector reduction
  // covers 512 contiguous bytes, where in row-major order its pairs touched 8 rows' lines (fp16 at
  // 16k: hdim 64 292 -> 307 TFLOPS, hdim 128 327 -> 342, hdim 256 252 -> 257; benchmarks/bwd_dq_atomics/).
  // With column chunks, each chunk's part of the block is one run in this order.
  static constexpr int kDqVec = 4;
  static_assert(kBlockM * kDqCols % (kDqVec * kNThreads) == 0, "whole vectors of dQ per thread");
  static_assert(kDqAccumRowPad % kBlockM == 0, "a sequence's last query block fits dq_accum's slack");
  static_assert(kBlockM % kDqSemaphoreRows == 0, "deterministic mode needs a dq_semaphore counter per query block");
  CUTE_HOST_DEVICE static constexpr int dq_accum_index(int tidx, int chunk, int vec) {
    return chunk * (kBlockM * kDqCols) + kDqVec * (vec * kNThreads + tidx);
  }

  // The products' accumulator fragments and the (row, col) of their values, written out: what
  // partition_fragment_C and partition_C(make_identity_tensor(...)) derive through the TiledMMAs'
  // thread-value layouts: template instantiations that do not change the kernel's code (2 % of this
  // TU's; benchmarks/edit_loop/README.md, "Fewer instantiations in the Ampere-path backward").
  // A warp's 16x8 MMA holds ((2 columns, 2 rows 8 apart), tiles in M, tiles in N) per thread;
  // kRowWarps x (kNWarps / kRowWarps) warps interleave by MMA tile: warp (wm, wn) owns the tiles
  // at rows 16 (wm + kRowWarps i) and columns 8 (wn + kColWarps j).
  template <int kRows, int kCols, int kRowWarps>
  using AccShape = Shape<Shape<_2, _2>, Int<kRows / (16 * kRowWarps)>, Int<kCols / (8 * (kNWarps / kRowWarps))>>;
  static constexpr int kSdPRowWarps = 2;  // TiledMmaSdP's warp layout
  static_assert(kBlockM % (16 * kSdPRowWarps) == 0 && kBlockN % (8 * (kNWarps / kSdPRowWarps)) == 0,
                "S and dP accumulators: whole MMA tiles per warp");
  using AccShapeSdP = AccShape<kBlockM, kBlockN, kSdPRowWarps>;
  using AccShapedKV = AccShape<kBlockN, kHeadDim, row_warps(kBlockN, kHeadDim)>;
  using AccShapedQ = AccShape<kBlockM, kDqCols, row_warps(kBlockM, kDqCols)>;
  // The (row, col) in the (kBlockM, kBlockN) tile of each value of thread tidx's S and dP
  // accumulators: lane % 4 -> column pair, lane / 4 -> row, warp (wm, wn) -> 16 rows, 8 columns
  // (thr_vmnk = TiledMmaSdP's get_thr_layout_vmnk().get_flat_coord(tidx)).
  template <class ThrVMNK>
  CUTE_HOST_DEVICE static auto sdp_coords(ThrVMNK const& thr_vmnk) {
    constexpr int kColWarps = kNWarps / kSdPRowWarps;
    using ThreadCoords = Layout<Shape<Shape<_4, _8>, Int<kSdPRowWarps>, Int<kColWarps>>,
                                Stride<Stride<ScaledBasis<_2, 1>, ScaledBasis<_1, 0>>, ScaledBasis<_16, 0>, ScaledBasis<_8, 1>>>;
    using ValueCoords = Layout<AccShapeSdP, Stride<Stride<ScaledBasis<_1, 1>, ScaledBasis<_8, 0>>,
                                                   ScaledBasis<Int<16 * kSdPRowWarps>, 0>, ScaledBasis<Int<8 * kColWarps>, 1>>>;
    const auto thread = ThreadCoords{}(get<0>(thr_vmnk), get<1>(thr_vmnk), get<2>(thr_vmnk));
    return make_tensor(make_inttuple_iter(thread), ValueCoords{});
  }

  static constexpr int kHeadRowElems = kHeadDim % 64 == 0 ? 64 : 32;
  static_assert(kDqCols % kHeadRowElems == 0, "a dQ column chunk must cover whole swizzled rows of K");
  using SmemLayoutQdO = decltype(tile_to_shape(SwizzledRows<kHeadRowElems>{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SwizzledRows<kHeadRowElems>{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutPdS = decltype(tile_to_shape(SwizzledRows<kSdPTileN>{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  // Transposed views over the same bytes, for the operands read "the other way" (ldmatrix.trans).
  using SmemLayoutQdOt = decltype(composition(SmemLayoutQdO{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, GenRowMajor{})));
  using SmemLayoutKt = decltype(composition(SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutPdSt = decltype(composition(SmemLayoutPdS{}, make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, GenRowMajor{})));

  static constexpr int kSmemQdOBytes = int(size(SmemLayoutQdO{})) * int(sizeof(Element));
  static constexpr int kSmemKVBytes = int(size(SmemLayoutKV{})) * int(sizeof(Element));
  static constexpr int kSmemPdSBytes = int(size(SmemLayoutPdS{})) * int(sizeof(Element));
  static constexpr int kSmemRowStatBytes = 2 * kBlockM * int(sizeof(float));  // LSE and dsum rows, per stage
  static constexpr int kSmemBytes =
      2 * kSmemKVBytes + kStages * (2 * kSmemQdOBytes + kSmemRowStatBytes) + 2 * kSmemPdSBytes;
  static_assert(kSmemBytes == bwd_smem_bytes(kHeadDim, kBlockM, kBlockN, kStages), "smem accounting");

  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomSdPB =  // K and V for S and dP: 16 or 8 keys per warp
      std::conditional_t<kSdPTileN == 64, SmemCopyAtom, Copy_Atom<SM75_U32x2_LDSM_N, Element>>;
  using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  using SmemCopyAtomStore = Copy_Atom<UniversalCopy<uint32_t>, Element>;

  // Zero-filling loads: Q and dO of a partial query block need no shared-memory clears (hdim 64:
  // 273 -> 292 TFLOPS at 16k, benchmarks/zero_fill/).
  using GmemTiledCopy = typename GmemRowCopies<Element, kNThreads, kHeadRowElems>::LoadZeroFill;
  using GmemTiledCopyStore = typename GmemRowCopies<Element, kNThreads, kHeadRowElems>::Store;

  // The (row, col) in a (kRows, kHeadDim) tile of the first element of each vector thread tidx
  // moves with GmemTiledCopy (its partition_S of make_identity_tensor, written out, see
  // AccShape): thread t takes the vector at row t / kThreadsPerRow, column kElemsPerAccess
  // (t % kThreadsPerRow); its vectors repeat every kNThreads / kThreadsPerRow rows and every
  // kHeadRowElems columns.
  template <int kRows>
  CUTE_HOST_DEVICE static auto gmem_coords(int tidx) {
    using Copies = GmemRowCopies<Element, kNThreads, kHeadRowElems>;
    constexpr int kThreadsPerRow = Copies::kThreadsPerRow;
    constexpr int kRowsPerPass = kNThreads / kThreadsPerRow;
    static_assert(kRows % kRowsPerPass == 0, "whole passes of the row copy over the tile");
    using ThreadCoords = Layout<Shape<Int<kThreadsPerRow>, Int<kRowsPerPass>>,
                                Stride<ScaledBasis<Int<Copies::kElemsPerAccess>, 1>, ScaledBasis<_1, 0>>>;
    using ValueCoords = Layout<Shape<Shape<Int<Copies::kElemsPerAccess>, _1>, Int<kRows / kRowsPerPass>, Int<kHeadDim / kHeadRowElems>>,
                               Stride<Stride<ScaledBasis<_1, 1>, _0>, ScaledBasis<Int<kRowsPerPass>, 0>, ScaledBasis<Int<kHeadRowElems>, 1>>>;
    return make_tensor(make_inttuple_iter(ThreadCoords{}(tidx)), ValueCoords{});
  }
};

}  // namespace flashbuild::ampere
