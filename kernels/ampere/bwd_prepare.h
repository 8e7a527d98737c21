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

// dq = softmax_scale * dq_accum in the input dtype. Grid (ceil(seqlen_q * kHeadDim / (4 *
// kConvertThreads)), nheads, batch): each thread converts four neighbouring columns of one row,
// read from the head's contiguous dq_accum rows and written to dq at its strides.
template <int kHeadDim, class Element>
__global__ void __launch_bounds__(kConvertThreads) bwd_convert_dq_kernel(const __grid_constant__ BwdParams params) {
  constexpr int kQuadsPerRow = kHeadDim / 4;
  const int head = blockIdx.y;
  const SeqInfo info(blockIdx.z, params.seqlen_q, params.seqlen_k, params.cu_seqlens_q, params.cu_seqlens_k, nullptr);
  const int quad = blockIdx.x * kConvertThreads + threadIdx.x;
  const int row = quad / kQuadsPerRow;
  if (row >= info.seqlen_q) { return; }
  const float* accum = params.dq_accum + info.q_offset(params.dq_batch_stride, kHeadDim) + head * params.dq_head_stride;
  auto* dq = static_cast<Element*>(params.dq) + info.q_offset(params.dq_out_batch_stride, params.dq_out_row_stride) +
             row * params.dq_out_row_stride + head * params.dq_out_head_stride;
  const float4 a = reinterpret_cast<const float4*>(accum)[quad];
  cutlass::Array<Element, 4> out;
  out[0] = Element(a.x * params.softmax_scale);
  out[1] = Element(a.y * params.softmax_scale);
  out[2] = Element(a.z * params.softmax_scale);
  out[3] = Element(a.w * params.softmax_scale);
  reinterpret_cast<cutlass::Array<Element, 4>*>(dq)[quad % kQuadsPerRow] = out;
}

}  // namespace flashbuild::ampere
