// The two small kernels around the backward kernel: before it, dsum = rowsum(dO * O) (common/bwd_dsum.h,
// which the Hopper backward launches too); after it, dQ = softmax_scale * dq_accum, converted to the input
// dtype, in the Ampere path's dq_accum order.
#pragma once

#include "ampere/bwd_traits.h"
#include "common/block_info.h"
#include "common/bwd_dsum.h"

namespace flashbuild::ampere {

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
