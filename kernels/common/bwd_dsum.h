// dsum = rowsum(dO * O) before the backward kernel: the softmax gradient's correction term, one fp32 per
// query row, laid out like the LSE. Family-neutral (its layout is the LSE's): the Ampere path and the Hopper
// backward (hopper/bwd_launch.h) both launch it, and this header reaches no backward traits, so an edit to
// either family's tiles recompiles only that family's TUs.
#pragma once

#include <cute/config.hpp>  // CUTE_UNROLL
#include <cutlass/array.h>

#include "common/block_info.h"
#include "common/launch.h"
#include "common/params.h"  // vector_addressable

namespace flashbuild {

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

}  // namespace flashbuild
