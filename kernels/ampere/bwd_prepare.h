// The two small kernels around the backward kernel: before it, dsum = rowsum(dO * O) (the softmax
// gradient's correction term, one fp32 per query row, laid out like the LSE); after it, dQ =
// softmax_scale * dq_accum, converted to the input dtype.
#pragma once

#include "ampere/block_info.h"
#include "ampere/bwd_traits.h"

namespace flashbuild::ampere {

constexpr int kDotRowsPerBlock = 8;  // one warp per query row

// Grid (ceil(seqlen_q / kDotRowsPerBlock), nheads, batch), kDotRowsPerBlock warps. O has the call's
// head dim (o_head_dim columns); dO may be padded wider with zeros, which add nothing. The general
// form, for any head dim, stride and alignment; launch_dot_do_o picks bwd_dot_do_o_vec_kernel where
// it can.
template <class Element>
__global__ void __launch_bounds__(32 * kDotRowsPerBlock) bwd_dot_do_o_kernel(const __grid_constant__ BwdParams params) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kDotRowsPerBlock + threadIdx.x / 32;
  const int head = blockIdx.y;
  const SeqInfo info(blockIdx.z, params.seqlen_q, params.seqlen_k, params.cu_seqlens_q, params.cu_seqlens_k, nullptr);
  if (row >= info.seqlen_q) { return; }
  const auto* d_o = static_cast<const Element*>(params.dout) + info.q_offset(params.do_batch_stride, params.do_row_stride) +
                    row * params.do_row_stride + head * params.do_head_stride;
  const auto* o = static_cast<const Element*>(params.o) + info.q_offset(params.o_batch_stride, params.o_row_stride) +
                  row * params.o_row_stride + head * params.o_head_stride;
  float sum = 0.f;
  for (int c = lane; c < params.o_head_dim; c += 32) { sum += float(d_o[c]) * float(o[c]); }
  CUTE_UNROLL
  for (int offset = 16; offset > 0; offset /= 2) { sum += __shfl_xor_sync(0xffffffff, sum, offset); }
  if (lane == 0) { params.dsum[info.row_stat_offset(params.lse_batch_stride, params.lse_head_stride, head) + row] = sum; }
}

// The same with 16-byte loads: kDotVecThreadsPerRow threads per row (a warp reads 4 rows), each
// summing 8-element vectors of dO * O, the row's threads then reduced by shuffles. Needs o_head_dim,
// the strides of dO and O and their addresses in whole 16-byte vectors. One warp per row with
// 2-byte loads ran at 0.9 TB/s at hdim 64 and 1.9 TB/s at hdim 128 on an H100 (152 / 72 us per call
// at 16k tokens and model dim 2048: benchmarks/hopper_bwd/kernel_split.py).
constexpr int kDotVecThreadsPerRow = 8;
constexpr int kDotVecThreads = 256;
constexpr int kDotVecRowsPerBlock = kDotVecThreads / kDotVecThreadsPerRow;
template <class Element>
__global__ void __launch_bounds__(kDotVecThreads) bwd_dot_do_o_vec_kernel(const __grid_constant__ BwdParams params) {
  constexpr int kVec = 16 / int(sizeof(Element));
  const int sub = threadIdx.x % kDotVecThreadsPerRow;
  const int row = blockIdx.x * kDotVecRowsPerBlock + threadIdx.x / kDotVecThreadsPerRow;
  const int head = blockIdx.y;
  const SeqInfo info(blockIdx.z, params.seqlen_q, params.seqlen_k, params.cu_seqlens_q, params.cu_seqlens_k, nullptr);
  const bool valid = row < info.seqlen_q;  // no early return: every lane takes part in the shuffles
  float sum = 0.f;
  if (valid) {
    const auto* d_o = static_cast<const Element*>(params.dout) + info.q_offset(params.do_batch_stride, params.do_row_stride) +
                      row * params.do_row_stride + head * params.do_head_stride;
    const auto* o = static_cast<const Element*>(params.o) + info.q_offset(params.o_batch_stride, params.o_row_stride) +
                    row * params.o_row_stride + head * params.o_head_stride;
    for (int c = sub * kVec; c < params.o_head_dim; c += kDotVecThreadsPerRow * kVec) {
      const uint4 raw_do = *reinterpret_cast<const uint4*>(d_o + c);
      const uint4 raw_o = *reinterpret_cast<const uint4*>(o + c);
      const auto& vd = *reinterpret_cast<const cutlass::Array<Element, kVec>*>(&raw_do);
      const auto& vo = *reinterpret_cast<const cutlass::Array<Element, kVec>*>(&raw_o);
      CUTE_UNROLL
      for (int i = 0; i < kVec; ++i) { sum += float(vd[i]) * float(vo[i]); }
    }
  }
  CUTE_UNROLL
  for (int offset = kDotVecThreadsPerRow / 2; offset > 0; offset /= 2) { sum += __shfl_xor_sync(0xffffffff, sum, offset); }
  if (valid && sub == 0) {
    params.dsum[info.row_stat_offset(params.lse_batch_stride, params.lse_head_stride, head) + row] = sum;
  }
}

// dsum for a backward call: the vector kernel when dO's and O's rows are 16-byte vectors
// (vector_addressable; the binding aligns dO, but passes the caller's O as it is) and o_head_dim is
// whole vectors, else the general one.
template <class Element>
void launch_dot_do_o(const BwdParams& params, cudaStream_t stream) {
  constexpr int kVec = 16 / int(sizeof(Element));
  // varlen: the sequences are packed rows (at most batch * seqlen_q of them), reached by row stride alone
  const bool packed = params.cu_seqlens_q != nullptr;
  const int64_t batches = packed ? 1 : params.batch;
  const int64_t rows = packed ? int64_t(params.batch) * params.seqlen_q : params.seqlen_q;
  const auto rows_are_vectors = [&](const void* ptr, int64_t batch_stride, int64_t row_stride, int64_t head_stride) {
    return vector_addressable(ptr, sizeof(Element), {{batch_stride, batches}, {row_stride, rows}, {head_stride, params.nheads}});
  };
  const bool vec = params.o_head_dim % kVec == 0 &&
                   rows_are_vectors(params.dout, params.do_batch_stride, params.do_row_stride, params.do_head_stride) &&
                   rows_are_vectors(params.o, params.o_batch_stride, params.o_row_stride, params.o_head_stride);
  if (vec) {
    const dim3 grid((params.seqlen_q + kDotVecRowsPerBlock - 1) / kDotVecRowsPerBlock, params.nheads, params.batch);
    launch(&bwd_dot_do_o_vec_kernel<Element>, grid, kDotVecThreads, 0, stream, params);
  } else {
    const dim3 grid((params.seqlen_q + kDotRowsPerBlock - 1) / kDotRowsPerBlock, params.nheads, params.batch);
    launch(&bwd_dot_do_o_kernel<Element>, grid, 32 * kDotRowsPerBlock, 0, stream, params);
  }
}

// dq = softmax_scale * dq_accum in the input dtype. Grid (ceil(seqlen_q / kBlockM), nheads, batch),
// the backward kernel's threads: thread t reads back the fragment that thread t of every backward CTA
// reduced into this query block, in that kernel's order (BwdTraits::dq_accum_index), and the block
// goes out in row order through shared memory, as the backward kernel's dK does.
template <class Traits>
__global__ void __launch_bounds__(Traits::kNThreads) bwd_convert_dq_kernel(const __grid_constant__ BwdParams params) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kHeadDim = Traits::kHeadDim;
  using TileMD = Shape<Int<kBlockM>, Int<kHeadDim>>;
  extern __shared__ char smem[];
  const int tidx = threadIdx.x;
  const int m_block = blockIdx.x;
  const int head = blockIdx.y;
  const SeqInfo info(blockIdx.z, params.seqlen_q, params.seqlen_k, params.cu_seqlens_q, params.cu_seqlens_k, nullptr);
  const int q_rows = info.seqlen_q - m_block * kBlockM;
  if (q_rows <= 0) { return; }
  const float* accum = params.dq_accum + info.dq_accum_offset(params.dq_batch_stride, kHeadDim) +
                       head * params.dq_head_stride + m_block * (kBlockM * kHeadDim);
  auto* dq = static_cast<Element*>(params.dq) + info.q_offset(params.dq_out_batch_stride, params.dq_out_row_stride) +
             head * params.dq_out_head_stride;

  using TileChunk = Shape<Int<kBlockM>, Int<Traits::kDqCols>>;
  typename Traits::TiledMmadQ mma_dq;
  Tensor sdQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemLayoutQdO{});
  auto copy_store = make_tiled_copy_C(typename Traits::SmemCopyAtomStore{}, mma_dq);
  auto thr_copy_store = copy_store.get_thread_slice(tidx);
  CUTE_UNROLL
  for (int c = 0; c < Traits::kDqChunks; ++c) {
    Tensor acc_dq = partition_fragment_C(mma_dq, TileChunk{});
    CUTE_UNROLL
    for (int g = 0; g < size(acc_dq) / Traits::kDqVec; ++g) {
      const float4 a = *reinterpret_cast<const float4*>(accum + Traits::dq_accum_index(tidx, c, g));
      acc_dq(4 * g) = a.x * params.softmax_scale;
      acc_dq(4 * g + 1) = a.y * params.softmax_scale;
      acc_dq(4 * g + 2) = a.z * params.softmax_scale;
      acc_dq(4 * g + 3) = a.w * params.softmax_scale;
    }
    Tensor rdQ = convert_type<Element>(acc_dq);
    copy(copy_store, thr_copy_store.retile_S(rdQ),
         thr_copy_store.partition_D(local_tile(sdQ, TileChunk{}, make_coord(0, c))));
  }
  __syncthreads();

  Tensor gdQ = local_tile(make_tensor(make_gmem_ptr(dq), make_shape(info.seqlen_q, Int<kHeadDim>{}),
                                      make_stride(params.dq_out_row_stride, _1{})),
                          TileMD{}, make_coord(m_block, 0));
  store_tile(typename Traits::GmemTiledCopyStore{}, tidx, sdQ, gdQ, q_rows);
}

}  // namespace flashbuild::ampere
