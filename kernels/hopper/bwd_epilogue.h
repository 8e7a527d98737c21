// What leaves the backward kernel, and the kernel after it:
//   dQ per step: each consumer thread adds its fp32 share of the block's dS K into dq_accum, two
//   adjacent columns per vector reduction (red.global.add.v2.f32), rows past seqlen_q skipped.
//   dq_accum's (batch, head) slice is row-major (rows, head_dim) here: BwdParams leaves the order
//   inside a block to the family, and only this family's conversion reads it.
//   dK (times the softmax scale) and dV at the end, straight from registers in the input dtype,
//   two columns per store, rows past seqlen_k skipped; per query head, as BwdParams asks.
//   bwd_convert_dq_kernel: dq = softmax_scale * dq_accum in the input dtype.
#pragma once

#include "hopper/bwd_traits.h"
#include "hopper/softmax.h"

namespace flashbuild::hopper {

// dst[0..1] += (a, b): fp32, 8-byte aligned.
CUTE_DEVICE void atomic_add2(float* dst, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
}

template <class Traits>
struct BwdEpilogue {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;

  // This thread's part of query block m_block's dQ, added to dq_accum.
  template <class FragDq>
  CUTE_DEVICE static void add_dq(BwdParams const& p, int head, int batch, int m_block, int thread_idx,
                                 FragDq const& tdQrdQ) {
    typename Traits::TiledMmadQ mma_dq;
    Tensor cdQ = mma_dq.get_thread_slice(thread_idx).partition_C(make_identity_tensor(select<0, 1>(typename Traits::TileShapedQ{})));
    Tensor acc_rc = make_tensor(tdQrdQ.data(), acc_rowcol(tdQrdQ.layout()));
    Tensor c_rc = make_tensor(cdQ.data(), acc_rowcol(cdQ.layout()));
    static_assert(decltype(size<1, 0>(acc_rc))::value == 2, "expects column pairs");
    float* dq = p.dq_accum + int64_t(batch) * p.dq_batch_stride + int64_t(head) * p.dq_head_stride +
                int64_t(m_block) * (kBlockM * kHeadDim);
    const int rows_left = p.seqlen_q - m_block * kBlockM;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(acc_rc); ++r) {
      const int row = get<0>(c_rc(r, 0));
      if (row < rows_left) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(acc_rc); c += 2) {
          atomic_add2(dq + row * kHeadDim + get<1>(c_rc(r, c)), acc_rc(r, c), acc_rc(r, c + 1));
        }
      }
    }
  }

  // dK (scaled here) and dV of this CTA's keys, from registers.
  template <class FragKV>
  CUTE_DEVICE static void store_dkv(BwdParams const& p, int n_block, int head, int batch, int thread_idx,
                                    FragKV& tdKrdK, FragKV const& tdVrdV) {
    CUTE_UNROLL
    for (int i = 0; i < size(tdKrdK); ++i) { tdKrdK(i) *= p.softmax_scale; }
    Tensor rdK = convert_fragment<Element>(tdKrdK);
    Tensor rdV = convert_fragment<Element>(tdVrdV);
    typename Traits::TiledMmadKV mma_dkv;
    Tensor c = mma_dkv.get_thread_slice(thread_idx).partition_C(make_identity_tensor(select<0, 1>(typename Traits::TileShapedKV{})));
    Tensor c_rc = make_tensor(c.data(), acc_rowcol(c.layout()));
    Tensor dk_rc = make_tensor(rdK.data(), acc_rowcol(rdK.layout()));
    Tensor dv_rc = make_tensor(rdV.data(), acc_rowcol(rdV.layout()));
    const int64_t offset = int64_t(batch) * p.dk_batch_stride + int64_t(head) * p.dk_head_stride;
    Element* dk = static_cast<Element*>(p.dk) + offset;
    Element* dv = static_cast<Element*>(p.dv) + offset;
    const int rows_left = p.seqlen_k - n_block * kBlockN;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(c_rc); ++r) {
      const int row = get<0>(c_rc(r, 0));
      if (row < rows_left) {
        const int64_t row_offset = int64_t(n_block * kBlockN + row) * p.dk_row_stride;
        CUTE_UNROLL
        for (int col = 0; col < size<1>(c_rc); col += 2) {
          const int64_t at = row_offset + get<1>(c_rc(r, col));
          *reinterpret_cast<uint32_t*>(dk + at) = *reinterpret_cast<uint32_t const*>(&dk_rc(r, col));
          *reinterpret_cast<uint32_t*>(dv + at) = *reinterpret_cast<uint32_t const*>(&dv_rc(r, col));
        }
      }
    }
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

}  // namespace flashbuild::hopper
