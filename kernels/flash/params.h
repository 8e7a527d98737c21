// The contract between the torch binding and every kernel family: plain structs and the launch
// entry points. Torch-free on purpose: kernel objects compile on machines with nvcc and no torch CUDA.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace flashbuild {

enum class DType : int { kFp16 = 0, kBf16 = 1 };

// Forward attention over (batch, seqlen, nheads, head_dim) tensors whose last dimension is
// contiguous. Strides are in elements. `head_dim` equals the kernel's head dim: the binding pads
// smaller head dims up to the kernel size before launching.
struct FwdParams {
  const void* __restrict__ q;
  const void* __restrict__ k;
  const void* __restrict__ v;
  void* __restrict__ o;
  float* __restrict__ lse;  // (batch, nheads, seqlen_q), natural log; +inf for rows that see no key

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;

  int batch;
  int seqlen_q;
  int seqlen_k;
  int nheads;
  int nheads_k;  // nheads % nheads_k == 0 (GQA/MQA)
  int head_dim;

  float softmax_scale;       // applied to Q·K^T
  float softmax_scale_log2;  // softmax_scale * log2(e), for exp2-based softmax
};

// Backward attention. The binding computes dsum (rowsum(dO * O), the softmax-gradient correction)
// before the launch and turns dq_accum into dQ after it. dK and dV are written per *query* head
// (shape (batch, seqlen_k, nheads, head_dim)); with GQA the binding sums each group of heads.
struct BwdParams {
  const void* __restrict__ q;
  const void* __restrict__ k;
  const void* __restrict__ v;
  const void* __restrict__ dout;
  const float* __restrict__ lse;   // (batch, nheads, seqlen_q), from the forward pass
  const float* __restrict__ dsum;  // (batch, nheads, seqlen_q)
  float* __restrict__ dq_accum;    // (batch, seqlen_q, nheads, head_dim), zeroed, accumulated atomically
  void* __restrict__ dk;           // (batch, seqlen_k, nheads, head_dim)
  void* __restrict__ dv;           // (batch, seqlen_k, nheads, head_dim)

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t do_batch_stride, do_row_stride, do_head_stride;
  int64_t dq_batch_stride, dq_row_stride, dq_head_stride;  // of dq_accum
  int64_t dk_batch_stride, dk_row_stride, dk_head_stride;  // of dk and dv alike

  int batch;
  int seqlen_q;
  int seqlen_k;
  int nheads;
  int nheads_k;
  int head_dim;

  float softmax_scale;
  float softmax_scale_log2;
};

// One explicit instantiation per variant lives in a generated translation unit.
// kArch is the compute capability times ten (80, 86, 89, 90).
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal>
void run_fwd(const FwdParams& params, cudaStream_t stream);

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal>
void run_bwd(const BwdParams& params, cudaStream_t stream);

}  // namespace flashbuild
