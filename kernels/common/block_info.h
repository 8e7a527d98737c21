// Where one (batch, head) slice starts and how long its sequences are: fixed-length batches,
// variable-length packed batches (cu_seqlens) and KV caches with per-batch lengths (seqused_k).
#pragma once

#include "common/params.h"

namespace flashbuild {

struct SeqInfo {
  int batch;
  int seqlen_q;
  int seqlen_k;
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;

  __device__ SeqInfo(int batch_, int max_seqlen_q, int max_seqlen_k, const int* cu_q, const int* cu_k,
                     const int* seqused_k)
      : batch(batch_),
        seqlen_q(cu_q ? cu_q[batch_ + 1] - cu_q[batch_] : max_seqlen_q),
        seqlen_k(cu_k ? cu_k[batch_ + 1] - cu_k[batch_] : (seqused_k ? seqused_k[batch_] : max_seqlen_k)),
        cu_seqlens_q(cu_q),
        cu_seqlens_k(cu_k) {}

  // Offset of this sequence's first row: packed sequences start at cu_seqlens[b] rows.
  __device__ int64_t q_offset(int64_t batch_stride, int64_t row_stride) const {
    return cu_seqlens_q ? int64_t(cu_seqlens_q[batch]) * row_stride : int64_t(batch) * batch_stride;
  }
  __device__ int64_t k_offset(int64_t batch_stride, int64_t row_stride) const {
    return cu_seqlens_k ? int64_t(cu_seqlens_k[batch]) * row_stride : int64_t(batch) * batch_stride;
  }
  // dq_accum's sequences have kDqAccumRowPad rows of slack each (BwdParams).
  __device__ int64_t dq_accum_offset(int64_t batch_stride, int64_t row_stride) const {
    return cu_seqlens_q ? (int64_t(cu_seqlens_q[batch]) + int64_t(kDqAccumRowPad) * batch) * row_stride
                        : int64_t(batch) * batch_stride;
  }
  // Row statistics (LSE, dsum) are contiguous along rows.
  __device__ int64_t row_stat_offset(int64_t batch_stride, int64_t head_stride, int head) const {
    return q_offset(batch_stride, 1) + int64_t(head) * head_stride;
  }
};

}  // namespace flashbuild
