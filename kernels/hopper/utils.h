// Small device helpers of the Hopper kernels, forward and backward: TMA loads of a box, wgmma's
// operands and issuing its products, storing an accumulator with stmatrix, clearing rows.
#pragma once

#include <cute/arch/cluster_sm90.hpp>  // set_block_rank (mapa)
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "hopper/sm90.h"

namespace flashbuild::hopper {

// A global tensor as TMA sees it, (rows, head_dim, heads, batches) with head_dim contiguous: Q, K, V, O
// and dO, dense or packed (view_extents, tile_scheduler.h, gives the extents). The launches build their
// descriptors from these (fwd_params.h, bwd_params.h).
using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;
using GmemStride = Stride<int64_t, _1, int64_t, int64_t>;

template <int kHeadDim, class Element>
CUTE_HOST_DEVICE auto gmem_view(Element* ptr, int rows, int heads, int batches, int64_t row_stride, int64_t head_stride,
                                int64_t batch_stride) {
  return make_tensor(make_gmem_ptr(ptr), make_shape(rows, int32_t(kHeadDim), heads, batches),
                     make_stride(row_stride, _1{}, head_stride, batch_stride));
}

// C (+)= A · B^T over all K steps, issued as one wgmma batch of this warpgroup. A is a tensor of
// shared-memory descriptors (kARegs = false) or registers (kARegs = true); B is descriptors.
// zero_init starts from C = 0 instead of reading it. With kWait >= 0 the call returns once at most
// kWait batches are still running; with kWait < 0 it returns at once and the caller waits
// (warpgroup_wait<N>) before touching C, or A when it is in registers.
template <int kWait, bool kARegs, class TiledMma, class FragA, class FragB, class FragC>
CUTE_DEVICE void wgmma(TiledMma& mma, FragA const& a, FragB const& b, FragC& c, bool zero_init) {
  static_assert(decltype(rank(a))::value == 3 && decltype(rank(b))::value == 3, "expects (MMA, MMA_M/N, MMA_K)");
  // The fences keep the compiler from moving register reads or writes of the operands across the
  // asynchronous product.
  if constexpr (kARegs) { warpgroup_fence_operand(const_cast<FragA&>(a)); }
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = zero_init ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) { warpgroup_wait<kWait>(); }
  warpgroup_fence_operand(c);
  if constexpr (kARegs) { warpgroup_fence_operand(const_cast<FragA&>(a)); }
}

// The TMA loads of a (kRows, head_dim) box, rows [row0, row0 + kRows) of (head, batch) of the global
// coordinates g (seqlen, head_dim, heads, batch), into the (kRows, head_dim) buffer `smem`. One
// instruction moves kRows x kCols (the swizzle atom's width); what it reads of its source and
// destination is the coordinates of its first element and the address of its buffer, so those are
// all that is built here. Written out rather than partitioned with local_tile and tma_partition: the
// same instructions, less compile time (benchmarks/edit_loop/README.md).
template <int kRows, class Tma, class GmemCoords, class SmemTensor>
CUTE_DEVICE void tma_load_box(Tma const& tma, GmemCoords const& g, int row0, int head, int batch, SmemTensor const& smem) {
  constexpr int kHeadDim = decltype(size<1>(smem.layout()))::value;
  constexpr int kCols = Tma::NumValSrc / kRows;
  static_assert(decltype(size<0>(smem.layout()))::value == kRows, "expects the box's rows in the buffer");
  static_assert(kCols * kRows == Tma::NumValSrc && kHeadDim % kCols == 0, "expects whole rows per TMA instruction");
  using Box = Layout<Int<Tma::NumValSrc>>;
  CUTE_UNROLL
  for (int i = 0; i < kHeadDim / kCols; ++i) {
    Tensor src = make_tensor(make_inttuple_iter(g(row0, i * kCols, head, batch)), Box{});
    Tensor dst = make_tensor(smem.data() + smem.layout()(0, i * kCols), Box{});
    copy(tma, src, dst);
  }
}

// One arrival on the barrier at `barrier`'s offset in CTA `rank`, releasing this thread's earlier reads and writes
// at cluster scope (cutlass::arch::ClusterBarrier::arrive's remote form has the default .cta scope).
CUTE_DEVICE void cluster_arrive_release(uint64_t const* barrier, int rank) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint32_t bar = cute::set_block_rank(cute::cast_smem_ptr_to_uint(barrier), uint32_t(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

// Wait for the phase of parity `phase` of a barrier of this CTA that other CTAs of the cluster arrive on, acquiring
// what they released at cluster scope.
CUTE_DEVICE void cluster_wait_acquire(uint64_t const* barrier, uint32_t phase) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint32_t bar = cute::cast_smem_ptr_to_uint(barrier);
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n"
      "}\n" ::"r"(bar),
      "r"(phase)
      : "memory");
#endif
}

// The multicast form of one of our TMA loads (make_tma_copy(SM90_TMA_LOAD{}, ...)), for tma_load_box: the same
// descriptor, each box landing at the same shared-memory offset in every CTA of the cluster that `mask` names and
// completing its bytes on each one's barrier at `bar`'s offset (cp.async.bulk.tensor .multicast::cluster).
template <class NumBits, class Aux, class T, class LayoutTV, class Tiler>
CUTE_DEVICE auto tma_multicast(TiledCopy<Copy_Atom<Copy_Traits<SM90_TMA_LOAD, NumBits, Aux>, T>, LayoutTV, Tiler> const& tma,
                               uint64_t& bar, uint16_t mask) {
  using Multicast = Copy_Traits<SM90_TMA_LOAD_MULTICAST_OP, NumBits>;
  return Copy_Atom<Multicast, T>{
      Multicast(tma.get_tma_descriptor(), &bar, mask, uint64_t(TMA::CacheHintSm90::EVICT_NORMAL))};
}

// The same loads with the box given as its own (kRows, head_dim) coordinates (a local_tile of g):
// each instruction reads g_box(0, its first column). The backward's Q and dO loads take this form:
// with tma_load_box's, the compiler strength-reduced the producer loop's row counters differently
// (other SASS, same result); with the tile's coordinates, the SASS is the tma_partition version's.
template <int kRows, class Tma, class GmemBox, class SmemTensor>
CUTE_DEVICE void tma_load_tile(Tma const& tma, GmemBox const& g_box, SmemTensor const& smem) {
  constexpr int kHeadDim = decltype(size<1>(smem.layout()))::value;
  constexpr int kCols = Tma::NumValSrc / kRows;
  static_assert(decltype(size<0>(smem.layout()))::value == kRows && decltype(size<0>(g_box))::value == kRows,
                "expects the box's rows in the buffer");
  static_assert(kCols * kRows == Tma::NumValSrc && kHeadDim % kCols == 0, "expects whole rows per TMA instruction");
  using Box = Layout<Int<Tma::NumValSrc>>;
  CUTE_UNROLL
  for (int i = 0; i < kHeadDim / kCols; ++i) {
    Tensor src = make_tensor(make_inttuple_iter(g_box(0, i * kCols)), Box{});
    Tensor dst = make_tensor(smem.data() + smem.layout()(0, i * kCols), Box{});
    copy(tma, src, dst);
  }
}

// wgmma's shared-memory operands, partitioned for their descriptors: (MMA, MMA_M/N, MMA_K[, rest]),
// one (kRows x 16) slice per 16 columns of K, for a tile of one wgmma per warpgroup in M and in N.
// It is what thr_mma.partition_A/B gives for such tiles, written out instead of derived through the
// TiledMMA's thread-value layouts (benchmarks/edit_loop/README.md). Modes after the first two of
// the buffer (a stage, a buffer index) are kept.
//   k_major_slices: rows [block * kRows, (block + 1) * kRows) of a (rows, K) buffer whose K is
//   contiguous (Q, K, V of the score products).
template <int kRows, class SmemTensor, class Block>
CUTE_DEVICE auto k_major_slices(SmemTensor const& s, Block block) {
  using SmemLayout = remove_cvref_t<decltype(s.layout())>;
  constexpr int kCols = decltype(size<1>(SmemLayout{}))::value;
  constexpr int kRowStride = decltype(get<0>(SmemLayout{})(_1{}))::value;
  constexpr int kLastRow = decltype(size<0>(SmemLayout{}))::value - 1;
  static_assert(decltype(get<0>(SmemLayout{})(Int<kLastRow>{}))::value == kLastRow * kRowStride,
                "expects the buffer's rows at a constant stride");
  using Slice = Layout<Shape<Int<kRows>, _16>, Stride<Int<kRowStride>, _1>>;
  auto slices = composition(get<1>(SmemLayout{}), Layout<Int<kCols / 16>, _16>{});  // each slice's first column
  auto rows = s.data() + block * Int<kRows * kRowStride>{};
  if constexpr (decltype(rank(SmemLayout{}))::value == 3) {
    return make_tensor(rows, make_layout(Slice{}, Layout<_1, _0>{}, slices, get<2>(SmemLayout{})));
  } else {
    return make_tensor(rows, make_layout(Slice{}, Layout<_1, _0>{}, slices));
  }
}

//   mn_major_slices: the same for a buffer seen as (rows, K) whose rows are the contiguous side (V
//   as (head_dim, keys); the transposed views of the backward), K at a constant stride: rows
//   [block * kRows, (block + 1) * kRows), all of them when kRows is the whole first mode (`block`
//   is then not read).
template <int kRows, class SmemTensor, class Block>
CUTE_DEVICE auto mn_major_slices(SmemTensor const& s, Block block) {
  using SmemLayout = remove_cvref_t<decltype(s.layout())>;
  using Rows = remove_cvref_t<decltype(get<0>(SmemLayout{}))>;
  constexpr int kK = decltype(size<1>(SmemLayout{}))::value;
  constexpr int kKStride = decltype(get<1>(SmemLayout{})(_1{}))::value;
  static_assert(decltype(get<1>(SmemLayout{})(Int<kK - 1>{}))::value == (kK - 1) * kKStride,
                "expects K at a constant stride");
  constexpr int kBlocks = decltype(size(Rows{}))::value / kRows;
  static_assert(kBlocks * kRows == decltype(size(Rows{}))::value, "expects whole blocks of rows");
  auto slices = Layout<Int<kK / 16>, Int<16 * kKStride>>{};
  auto with_rest = [&](auto rows, auto slice) {
    if constexpr (decltype(rank(SmemLayout{}))::value == 3) {
      return make_tensor(rows, make_layout(slice, Layout<_1, _0>{}, slices, get<2>(SmemLayout{})));
    } else {
      return make_tensor(rows, make_layout(slice, Layout<_1, _0>{}, slices));
    }
  };
  if constexpr (kBlocks == 1) {
    return with_rest(s.data(), make_layout(Rows{}, Layout<_16, Int<kKStride>>{}));
  } else {
    constexpr int kBlockStride = decltype(Rows{}(Int<kRows>{}))::value;
    static_assert(decltype(Rows{}(Int<(kBlocks - 1) * kRows>{}))::value == (kBlocks - 1) * kBlockStride,
                  "expects the blocks of rows at a constant stride");
    auto piece = composition(Rows{}, Layout<Int<kRows>>{});
    return with_rest(s.data() + block * Int<kBlockStride>{}, make_layout(piece, Layout<_16, Int<kKStride>>{}));
  }
}

// A warpgroup-stacked accumulator, converted to 16-bit elements, into a (rows, cols) buffer with
// stmatrix (.x4: one 16x16 patch per instruction, as four 8x8 blocks: rows 0-7 and 8-15 of columns
// 0-7, then of columns 8-15). kThreads threads (whole warpgroups) hold the buffer's rows, 16 per warp.
// Registers and addresses are both in the wgmma accumulator's own order, so the partition is spelled
// out here instead of derived by CuTe's tiled copy (make_tiled_copy_C, retile_S, partition_D, copy: a
// fifth of cicc's time for the forward TU, benchmarks/edit_loop/README.md); the offsets, and so the
// SASS, are the same.
//   Addresses (stmatrix_rows): warp w's patch i covers rows 16w..16w+15 and columns 16i..16i+15; lane
//   l gives the address of row l % 16, columns 8 * (l / 16) on. stmatrix_rows shifts the buffer (any
//   modes after the first two kept, e.g. a buffer index) to the address of column 0; callers take it
//   where the tiled copy's partition_D was (built at the store instead, the backward's registers were
//   allocated differently).
//   Registers (stmatrix_accumulator): a thread's words 4i..4i+3 (column groups 2i and 2i + 1, each at
//   its quad's row r and r + 8) are patch i's four blocks.
template <int kThreads, class SmemTensor>
CUTE_DEVICE auto stmatrix_rows(SmemTensor const& smem, int thread_idx) {
  using SmemLayout = remove_cvref_t<decltype(smem.layout())>;
  using Rows = remove_cvref_t<decltype(get<0>(SmemLayout{}))>;
  constexpr int kWarps = kThreads / cutlass::NumThreadsPerWarp;
  constexpr int kRows = decltype(size(Rows{}))::value;
  constexpr int kRowStride = decltype(Rows{}(_1{}))::value;
  static_assert(kRows == 16 * kWarps, "expects 16 rows per warp");
  static_assert(decltype(Rows{}(Int<kRows - 1>{}))::value == (kRows - 1) * kRowStride,
                "expects the buffer's rows at a constant stride (a K-major swizzle atom tiled down the rows first)");
  static_assert(decltype(get<1>(SmemLayout{})(_8{}))::value == 8, "expects 8 contiguous columns per row address");
  using ThreadOffset = Layout<Shape<_16, _2, Int<kWarps>>, Stride<Int<kRowStride>, _8, Int<16 * kRowStride>>>;
  return make_tensor(smem.data() + ThreadOffset{}(thread_idx), SmemLayout{});
}

template <class SmemRows, class Frag>
CUTE_DEVICE void stmatrix_accumulator(SmemRows const& rows, Frag const& frag) {
  using SmemLayout = remove_cvref_t<decltype(rows.layout())>;
  static_assert(decltype(rank(SmemLayout{}))::value == 2, "expects one (rows, cols) buffer");
  constexpr int kCols = decltype(size<1>(SmemLayout{}))::value;
  Tensor words = recast<uint32_t>(frag);
  static_assert(decltype(size(words))::value == kCols / 4, "expects 4 words per thread per 16 columns");
  CUTE_UNROLL
  for (int i = 0; i < kCols / 16; ++i) {
    auto& dst = reinterpret_cast<uint128_t&>(*(rows.data() + SmemLayout{}(0, 16 * i)));
    SM90_U32x4_STSM_N::copy(words(4 * i), words(4 * i + 1), words(4 * i + 2), words(4 * i + 3), dst);
  }
}

// `value`, unknown to the compiler from here on (an opaque move). Addresses derived from a thread index
// alone are loop-invariant, so the compiler computes them before the persistent tile loop and holds
// them (in the hdim-64 forward: spilled) across every main loop; derived from opaque(thread index)
// they are computed where they are used.
CUTE_DEVICE int opaque(int value) {
  int out;
  asm volatile("mov.b32 %0, %1;" : "=r"(out) : "r"(value));
  return out;
}

// Rows [first_row, kRows) of a (kRows, cols) shared-memory buffer of 16-bit elements set to 0 by
// kThreads threads (thread_idx counted from 0 among them), one 16-byte store at a time: a swizzle atom
// keeps 16-byte chunks whole, so each store is one chunk of one row wherever the swizzle put it. The
// thread index goes through opaque(): derived from it directly (when the backward's consumers cleared
// rows in their main loop) the addresses were hoisted out of the loop and spilled, 16 bytes of stack
// (benchmarks/hopper_varlen/README.md, "The backward").
// `rest`: the coordinates of the buffer's further modes (a stage), if any.
template <int kThreads, class SmemTensor, class... Rest>
CUTE_DEVICE void clear_rows(SmemTensor s, int first_row, int thread_idx, Rest... rest) {
  using Element = typename SmemTensor::value_type;
  constexpr int kRows = decltype(size<0>(s))::value;
  constexpr int kVec = 16 / int(sizeof(Element));
  constexpr int kVecsPerRow = decltype(size<1>(s))::value / kVec;
  const int chunks = (kRows - first_row) * kVecsPerRow;
  CUTE_NO_UNROLL
  for (int i = opaque(thread_idx); i < chunks; i += kThreads) {
    const int row = first_row + i / kVecsPerRow, col = (i % kVecsPerRow) * kVec;
    *reinterpret_cast<uint128_t*>(&s(row, col, rest...)) = uint128_t{0, 0};
  }
}

}  // namespace flashbuild::hopper
