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

// One explicit instantiation per variant lives in a generated translation unit.
// kArch is the compute capability times ten (80, 86, 89, 90).
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal>
void run_fwd(const FwdParams& params, cudaStream_t stream);

}  // namespace flashbuild
