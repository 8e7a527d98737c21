// Where one (batch, head) slice of Q, K, V, O and the LSE starts in global memory.
#pragma once

#include "flash/params.h"

namespace flashbuild::ampere {

struct FwdBlockInfo {
  int seqlen_q;
  int seqlen_k;
  int64_t q_offset, k_offset, v_offset, o_offset, lse_offset;

  __device__ FwdBlockInfo(const FwdParams& p, int batch, int head)
      : seqlen_q(p.seqlen_q), seqlen_k(p.seqlen_k) {
    // Grouped-query attention: a run of nheads / nheads_k query heads shares one K/V head.
    const int head_k = head / (p.nheads / p.nheads_k);
    q_offset = batch * p.q_batch_stride + head * p.q_head_stride;
    k_offset = batch * p.k_batch_stride + head_k * p.k_head_stride;
    v_offset = batch * p.v_batch_stride + head_k * p.v_head_stride;
    o_offset = batch * p.o_batch_stride + head * p.o_head_stride;
    lse_offset = (int64_t(batch) * p.nheads + head) * p.seqlen_q;
  }
};

}  // namespace flashbuild::ampere
