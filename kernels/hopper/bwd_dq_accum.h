// dq_accum, the backward's fp32 dQ buffer, as both sides of it read it: where a query block of a sequence
// lives and which (row, column) each consumer thread's values are (the main kernel adds into it in that
// order: bwd_epilogue.h), and the kernels that turn it into dq (dq = softmax_scale * dq_accum in the input
// dtype, for each order: bwd_traits.h, DqOrder). A header of its own so that the launch TU, which compiles
// the conversion, does not include the main kernel's epilogue: an edit there recompiles the kernel TUs alone.
#pragma once

#include "hopper/accumulator.h"     // accumulator_coords
#include "hopper/bwd_traits.h"
#include "hopper/tile_scheduler.h"  // SeqRange

namespace flashbuild::hopper {

template <class Traits>
struct DqAccumLayout {
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kHeadDim = Traits::kHeadDim;

  // The (query row, column) in the block of each value of a consumer thread's dQ (accumulator.h,
  // accumulator_coords: the dQ product's warpgroups stack in M and N as bwd_traits.h lays them out).
  CUTE_DEVICE static auto coords(int thread_idx) {
    typename Traits::TiledMmadQ mma_dq;
    return accumulator_coords<Traits::kDqAtomN, Traits::kDqWarpgroupsM, Traits::kDqWarpgroupsN>(
        mma_dq.get_thr_layout_vmnk().get_flat_coord(thread_idx));
  }

  // Where consumer thread t's g-th float4 of dQ lies in its block (in float4s): g * kNumMmaThreads + t, a
  // warp's vectors contiguous; with kDqHalves warpgroup 0's vectors first, then warpgroup 1's (each half one
  // bulk reduction).
  static constexpr int kVecsPerThread = kBlockM * kHeadDim / (4 * Traits::kNumMmaThreads);
  CUTE_HOST_DEVICE static constexpr int vec(int g, int t) {
    if constexpr (Traits::kDqHalves) {
      return ((t / kWarpgroupThreads) * kVecsPerThread + g) * kWarpgroupThreads + t % kWarpgroupThreads;
    } else {
      return g * Traits::kNumMmaThreads + t;
    }
  }

  // Query block m_block of a sequence in dq_accum (BwdParams: packed sequences start kDqAccumRowPad
  // rows apart beyond their offsets; dq_batch_stride is then 0).
  CUTE_DEVICE static float* block(BwdParams const& p, SeqRange const& seq, int head, int batch, int m_block) {
    const int64_t row0 = p.cu_seqlens_q ? int64_t(seq.q_row0) + int64_t(kDqAccumRowPad) * batch : 0;
    return p.dq_accum + int64_t(batch) * p.dq_batch_stride + int64_t(head) * p.dq_head_stride +
           (row0 + int64_t(m_block) * kBlockM) * kHeadDim;
  }
};

// dq = softmax_scale * dq_accum in the input dtype: four elements per thread.
// Grid (ceil(seqlen_q * kHeadDim / 4 / kConvertThreads), nheads, batch).
constexpr int kConvertThreads = 256;
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kConvertThreads) bwd_convert_dq_kernel(const __grid_constant__ BwdParams params) {
  const int64_t idx = int64_t(blockIdx.x) * kConvertThreads + threadIdx.x;
  if (idx * 4 >= int64_t(params.seqlen_q) * kHeadDim) { return; }
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int row = int(idx * 4 / kHeadDim);
  const int col = int(idx * 4 % kHeadDim);
  const float4 a = *reinterpret_cast<const float4*>(params.dq_accum + int64_t(batch) * params.dq_batch_stride +
                                                    int64_t(head) * params.dq_head_stride + idx * 4);
  const float s = params.softmax_scale;
  cutlass::Array<float, 4> f{};
  f[0] = a.x * s, f[1] = a.y * s, f[2] = a.z * s, f[3] = a.w * s;
  cutlass::NumericArrayConverter<Element, float, 4> convert;
  const cutlass::Array<Element, 4> out = convert(f);
  Element* dq = static_cast<Element*>(params.dq) + int64_t(batch) * params.dq_out_batch_stride +
                int64_t(head) * params.dq_out_head_stride + int64_t(row) * params.dq_out_row_stride + col;
  *reinterpret_cast<uint2*>(dq) = *reinterpret_cast<const uint2*>(&out);
}

// The same for the fragment order: grid (ceil(seqlen_q / kBlockM), nheads, batch), the backward
// kernel's consumer threads. Thread t reads back what consumer thread t of every CTA added (16-byte
// loads, a warp's 512 bytes contiguous; all of a thread's loads issued before any use), puts each
// scaled column pair at its row and column in shared memory, and the block then leaves row by row,
// 16 bytes per thread. (Stored from the fragment's own places, each warp store wrote 4 bytes into
// each of 8 rows: 0.9 TB/s, 215 us per call at 16k tokens and model dim 2048 on an H100, where the
// bytes need ~60 us: benchmarks/hopper_bwd/kernel_split.py.)
template <class Traits>
__global__ void __launch_bounds__(Traits::kNumMmaThreads) bwd_convert_dq_fragment_kernel(const __grid_constant__ BwdParams params) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kThreads = Traits::kNumMmaThreads;
  constexpr int kVec = 16 / int(sizeof(Element));  // elements per 16-byte access
  // A row padded by 16 bytes: the 8 rows of one fragment store then start 4 banks apart, so a
  // warp's 32 column pairs fall into 32 distinct banks.
  constexpr int kPitch = kHeadDim + kVec;
  constexpr int kLoads = kBlockM * kHeadDim / (4 * kThreads);  // float4s per thread
  static_assert(kHeadDim % kVec == 0, "rows leave in whole 16-byte vectors");
  __shared__ alignas(16) Element tile[kBlockM * kPitch];

  const int t = threadIdx.x;
  const int m_block = blockIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const SeqRange seq = SeqRange::of(params, batch);
  if (m_block * kBlockM >= seq.seqlen_q) { return; }  // packed: past this sequence's rows (the grid covers the longest)
  Tensor cdQ = DqAccumLayout<Traits>::coords(t);
  static_assert(decltype(size(cdQ))::value == 4 * kLoads, "a thread's fragment is its kLoads float4s");
  // The whole block is read: dq_accum's slack rows (kDqAccumRowPad) hold the rows past seqlen_q.
  const float4* accum = reinterpret_cast<const float4*>(DqAccumLayout<Traits>::block(params, seq, head, batch, m_block));
  float4 a[kLoads];
  CUTE_UNROLL
  for (int g = 0; g < kLoads; ++g) { a[g] = accum[DqAccumLayout<Traits>::vec(g, t)]; }
  const float s = params.softmax_scale;
  CUTE_UNROLL
  for (int g = 0; g < kLoads; ++g) {
    CUTE_UNROLL
    for (int half = 0; half < 2; ++half) {  // floats (4g, 4g + 1) and (4g + 2, 4g + 3): a column pair each
      const auto coord = cdQ(4 * g + 2 * half);
      cutlass::Array<float, 2> f{};
      f[0] = (half ? a[g].z : a[g].x) * s;
      f[1] = (half ? a[g].w : a[g].y) * s;
      cutlass::NumericArrayConverter<Element, float, 2> convert;
      const cutlass::Array<Element, 2> out = convert(f);
      *reinterpret_cast<uint32_t*>(&tile[get<0>(coord) * kPitch + get<1>(coord)]) = *reinterpret_cast<const uint32_t*>(&out);
    }
  }
  __syncthreads();

  // dq's rows start on 16-byte boundaries: can_run took the call only if TMA could address dq.
  const int rows_left = seq.seqlen_q - m_block * kBlockM;
  Element* dq = static_cast<Element*>(params.dq) + int64_t(batch) * params.dq_out_batch_stride +
                int64_t(head) * params.dq_out_head_stride + int64_t(seq.q_row0 + m_block * kBlockM) * params.dq_out_row_stride;
  constexpr int kVecsPerRow = kHeadDim / kVec;
  CUTE_UNROLL
  for (int i = t; i < kBlockM * kVecsPerRow; i += kThreads) {
    const int row = i / kVecsPerRow;
    const int col = i % kVecsPerRow * kVec;
    if (row < rows_left) {
      *reinterpret_cast<uint4*>(dq + int64_t(row) * params.dq_out_row_stride + col) =
          *reinterpret_cast<const uint4*>(&tile[row * kPitch + col]);
    }
  }
}

}  // namespace flashbuild::hopper
