// The two small kernels around the backward kernel: before it, dsum = rowsum(dO * O) (the softmax
// gradient's correction term, one fp32 per query row, laid out like the LSE); after it, dQ =
// softmax_scale * dq_accum, converted to the input dtype.
#pragma once

#include "ampere/block_info.h"
#include "ampere/utils.h"

namespace flashbuild::ampere {

constexpr int kDotRowsPerBlock = 8;  // one warp per query row

// Grid (ceil(seqlen_q / kDotRowsPerBlock), nheads, batch), kDotRowsPerBlock warps. O has the call's
// head dim (o_head_dim columns); dO may be padded wider with zeros, which add nothing.
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

constexpr int kConvertThreads = 256;

// dq[i] = softmax_scale * dq_accum[i] over dq_numel contiguous elements, four at a time (the
// count is a multiple of the kernel head dim, so of 32).
template <class Element>
__global__ void __launch_bounds__(kConvertThreads) bwd_convert_dq_kernel(const __grid_constant__ BwdParams params) {
  const int64_t quads = params.dq_numel / 4;
  const auto* accum = reinterpret_cast<const float4*>(params.dq_accum);
  auto* dq = static_cast<Element*>(params.dq);
  for (int64_t i = blockIdx.x * int64_t(kConvertThreads) + threadIdx.x; i < quads;
       i += int64_t(gridDim.x) * kConvertThreads) {
    const float4 a = accum[i];
    cutlass::Array<Element, 4> out;
    out[0] = Element(a.x * params.softmax_scale);
    out[1] = Element(a.y * params.softmax_scale);
    out[2] = Element(a.z * params.softmax_scale);
    out[3] = Element(a.w * params.softmax_scale);
    reinterpret_cast<cutlass::Array<Element, 4>*>(dq)[i] = out;
  }
}

}  // namespace flashbuild::ampere
