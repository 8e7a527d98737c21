// What leaves the backward kernel, and the kernels after it:
//   dQ per step: each consumer thread adds its fp32 share of the block's dS K into dq_accum, in
//   the order Traits::kDqOrder says (bwd_traits.h): row-major, two adjacent columns per vector
//   reduction (red.global.add.v2.f32), rows past seqlen_q skipped; or in fragment order, four
//   floats per reduction (red.global.add.v4.f32), the block's slack rows taking the padded rows'
//   zeros.
//   Deterministic mode (kOrdered: the kernel instantiation that BwdParams::dq_semaphore selects): the
//   CTAs that add into one query block take turns (common/bwd_dq_order.h: the order, its counters, why
//   it cannot deadlock). With kFragmentBulk only the dQ writer warp waits and hands on; otherwise the
//   consumers wait at add_dq.
//   dK (times the softmax scale) and dV at the end, straight from registers in the input dtype,
//   two columns per store, rows past seqlen_k skipped; per query head, as BwdParams asks.
//   bwd_convert_dq_kernel / bwd_convert_dq_fragment_kernel: dq = softmax_scale * dq_accum in the
//   input dtype, for each order.
#pragma once

#include "common/bwd_dq_order.h"  // dq_counter, spin_until_turn, release_turn: deterministic mode's turns
#include "hopper/bwd_traits.h"
#include "hopper/softmax.h"
#include "hopper/tile_scheduler.h"  // SeqRange

namespace flashbuild::hopper {

// dst[0..1] += (a, b): fp32, 8-byte aligned.
CUTE_DEVICE void atomic_add2(float* dst, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
}
// dst[0..3] += (a, b, c, d): fp32, 16-byte aligned.
CUTE_DEVICE void atomic_add4(float* dst, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

template <class Traits>
struct BwdEpilogue {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;

  static constexpr int kDqWriterThreads = Traits::kNumMmaThreads + cutlass::NumThreadsPerWarp;

  // The (query row, column) in the block of each value of a consumer thread's dQ (softmax.h,
  // accumulator_coords: the dQ product's warpgroups stack in M and N as bwd_traits.h lays them out).
  CUTE_DEVICE static auto dq_coords(int thread_idx) {
    typename Traits::TiledMmadQ mma_dq;
    return accumulator_coords<Traits::kDqAtomN, Traits::kDqWarpgroupsM, Traits::kDqWarpgroupsN>(
        mma_dq.get_thr_layout_vmnk().get_flat_coord(thread_idx));
  }

  // Query block m_block of a sequence in dq_accum (BwdParams: packed sequences start kDqAccumRowPad
  // rows apart beyond their offsets; dq_batch_stride is then 0).
  CUTE_DEVICE static float* dq_block(BwdParams const& p, SeqRange const& seq, int head, int batch, int m_block) {
    const int64_t row0 = p.cu_seqlens_q ? int64_t(seq.q_row0) + int64_t(kDqAccumRowPad) * batch : 0;
    return p.dq_accum + int64_t(batch) * p.dq_batch_stride + int64_t(head) * p.dq_head_stride +
           (row0 + int64_t(m_block) * kBlockM) * kHeadDim;
  }

  // This thread's part of query block m_block's dQ, added to dq_accum (kFragmentBulk: handed to the
  // dQ writer through shared memory; `first`: the CTA's first block, sdQ not yet used). `blocks` and
  // n_block give this CTA's turn in deterministic mode (kOrdered).
  template <bool kOrdered, class Storage, class Blocks, class FragDq>
  CUTE_DEVICE static void add_dq(BwdParams const& p, Storage& storage, SeqRange const& seq, Blocks const& blocks,
                                 int n_block, int head, int batch, int m_block, bool first, int thread_idx,
                                 FragDq const& tdQrdQ) {
    if constexpr (Traits::kDqBulk) {
      static_assert(decltype(size(tdQrdQ))::value % 4 == 0, "fragment order moves four floats at a time");
      if (!first) { cutlass::arch::NamedBarrier::sync(kDqWriterThreads, static_cast<int>(BwdBarrier::kdQEmpty)); }
      CUTE_UNROLL
      for (int g = 0; g < size(tdQrdQ) / 4; ++g) {
        *reinterpret_cast<float4*>(storage.dq + (g * Traits::kNumMmaThreads + thread_idx) * 4) =
            make_float4(tdQrdQ(4 * g), tdQrdQ(4 * g + 1), tdQrdQ(4 * g + 2), tdQrdQ(4 * g + 3));
      }
      cutlass::arch::fence_view_async_shared();  // generic-proxy stores, read next by the bulk copy
      cutlass::arch::NamedBarrier::arrive(kDqWriterThreads, static_cast<int>(BwdBarrier::kdQFull));
    } else {
      // Deterministic mode: consumer thread 0 waits for the turn, the barrier holds the others back;
      // after the adds every thread fences them, and thread 0 hands on once all have.
      constexpr int kTurn = static_cast<int>(BwdBarrier::kdQTurn);
      if constexpr (kOrdered) {
        if (thread_idx == 0) { spin_until_turn(dq_counter(p, batch, head, m_block), blocks.turn(n_block, m_block)); }
        cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, kTurn);
      }
      add_dq_global(p, seq, head, batch, m_block, thread_idx, tdQrdQ);
      if constexpr (kOrdered) {
        __threadfence();
        cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, kTurn);
        if (thread_idx == 0) { release_turn(dq_counter(p, batch, head, m_block)); }
      }
    }
  }

  // kFragmentBulk's dQ writer (one producer warp): per query block, once the consumers have written
  // sdQ, one bulk reduction adds it to the block's (contiguous) dq_accum slice; sdQ is handed back
  // once the copy has read it. Deterministic mode (kOrdered): the leader lane waits for the block's
  // turn before the reduction, and hands on once the reduction has completed (not only read sdQ); the
  // proxy fences order the bulk copy's (async proxy) adds with the counter's (generic proxy) acquire
  // and release.
  template <bool kOrdered, class Storage, class Blocks>
  CUTE_DEVICE static void dq_writer(BwdParams const& p, Storage& storage, SeqRange const& seq, Blocks const& blocks,
                                    int n_block, int head, int batch, int m_block_min, int m_block_max) {
    const bool leader = int(threadIdx.x) % cutlass::NumThreadsPerWarp == 0;
    constexpr uint32_t kBytes = kBlockM * kHeadDim * sizeof(float);
    const uint32_t smem = cute::cast_smem_ptr_to_uint(storage.dq);
    for (int m_block = m_block_min; m_block < m_block_max; ++m_block) {
      if constexpr (kOrdered) {
        if (leader) {
          spin_until_turn(dq_counter(p, batch, head, m_block), blocks.turn(n_block, m_block));
          asm volatile("fence.proxy.async.global;\n" ::: "memory");
        }
      }
      cutlass::arch::NamedBarrier::sync(kDqWriterThreads, static_cast<int>(BwdBarrier::kdQFull));
      if (leader) {
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                         dq_block(p, seq, head, batch, m_block)),
                     "r"(smem), "r"(kBytes)
                     : "memory");
        cute::tma_store_arrive();  // commit the bulk group
        if constexpr (kOrdered) {
          asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");  // the adds are done
          asm volatile("fence.proxy.async.global;\n" ::: "memory");
          release_turn(dq_counter(p, batch, head, m_block));
        } else {
          cute::tma_store_wait<0>();  // ... and wait until it has read sdQ
        }
      }
      __syncwarp();
      if (m_block + 1 < m_block_max) {
        cutlass::arch::NamedBarrier::arrive(kDqWriterThreads, static_cast<int>(BwdBarrier::kdQEmpty));
      }
    }
    if (leader) { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }  // the last reduction is done
  }

  template <class FragDq>
  CUTE_DEVICE static void add_dq_global(BwdParams const& p, SeqRange const& seq, int head, int batch, int m_block,
                                        int thread_idx, FragDq const& tdQrdQ) {
    Tensor cdQ = dq_coords(thread_idx);
    Tensor acc_rc = make_tensor(tdQrdQ.data(), acc_rowcol(tdQrdQ.layout()));
    Tensor c_rc = make_tensor(cdQ.data(), acc_rowcol(cdQ.layout()));
    static_assert(decltype(size<1, 0>(acc_rc))::value == 2, "expects column pairs");
    float* dq = dq_block(p, seq, head, batch, m_block);
    if constexpr (Traits::kDqFragmentOrder) {
      // Float 4g + j of thread t at (g * kNumMmaThreads + t) * 4 + j: a warp's vectors are contiguous.
      static_assert(decltype(size(tdQrdQ))::value % 4 == 0, "fragment order moves four floats at a time");
      CUTE_UNROLL
      for (int g = 0; g < size(tdQrdQ) / 4; ++g) {
        atomic_add4(dq + (g * Traits::kNumMmaThreads + thread_idx) * 4, tdQrdQ(4 * g), tdQrdQ(4 * g + 1),
                    tdQrdQ(4 * g + 2), tdQrdQ(4 * g + 3));
      }
      return;
    }
    const int rows_left = seq.seqlen_q - m_block * kBlockM;
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
  CUTE_DEVICE static void store_dkv(BwdParams const& p, SeqRange const& seq, int n_block, int head, int batch,
                                    int thread_idx, FragKV& tdKrdK, FragKV const& tdVrdV) {
    CUTE_UNROLL
    for (int i = 0; i < size(tdKrdK); ++i) { tdKrdK(i) *= p.softmax_scale; }
    Tensor rdK = convert_fragment<Element>(tdKrdK);
    Tensor rdV = convert_fragment<Element>(tdVrdV);
    typename Traits::TiledMmadKV mma_dkv;
    Tensor c = accumulator_coords<Traits::kDkvAtomN, Traits::kKeyWarpgroups, Traits::kColWarpgroups>(
        mma_dkv.get_thr_layout_vmnk().get_flat_coord(thread_idx));
    Tensor c_rc = make_tensor(c.data(), acc_rowcol(c.layout()));
    Tensor dk_rc = make_tensor(rdK.data(), acc_rowcol(rdK.layout()));
    Tensor dv_rc = make_tensor(rdV.data(), acc_rowcol(rdV.layout()));
    const int64_t offset = int64_t(batch) * p.dk_batch_stride + int64_t(head) * p.dk_head_stride;
    Element* dk = static_cast<Element*>(p.dk) + offset;
    Element* dv = static_cast<Element*>(p.dv) + offset;
    const int rows_left = seq.seqlen_k - n_block * kBlockN;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(c_rc); ++r) {
      const int row = get<0>(c_rc(r, 0));
      if (row < rows_left) {
        const int64_t row_offset = int64_t(seq.k_row0 + n_block * kBlockN + row) * p.dk_row_stride;
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

// The same for the fragment order: grid (ceil(seqlen_q / kBlockM), nheads, batch), the backward
// kernel's consumer threads. Thread t reads back what consumer thread t of every CTA added (16-byte
// loads, a warp's 512 bytes contiguous; all of a thread's loads issued before any use), puts each
// scaled column pair at its row and column in shared memory, and the block then leaves row by row,
// 16 bytes per thread. (Stored from the fragment's own places, each warp store wrote 4 bytes into
// each of 8 rows: 0.9 TB/s, 215 us per call at 16k tokens and model dim 2048 on an H100, where the
// bytes need ~60 us: benchmarks/hopper_bwd/kernel_split.py.)
template <class Traits>
__global__ void __launch_bounds__(Traits::kNumMmaThreads) bwd_convert_dq_fragment_kernel(const __grid_constant__ BwdParams params) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kThreads = Traits::kNumMmaThreads;
  constexpr int kVec = 16 / int(sizeof(Element));  // elements per 16-byte access
  // A row padded by 16 bytes: the 8 rows of one fragment store then start 4 banks apart, so a
  // warp's 32 column pairs fall into 32 distinct banks.
  constexpr int kPitch = kHeadDim + kVec;
  constexpr int kLoads = kBlockM * kHeadDim / (4 * kThreads);  // float4s per thread
  static_assert(kHeadDim % kVec == 0, "rows leave in whole 16-byte vectors");
  __shared__ alignas(16) Element tile[kBlockM * kPitch];

  const int t = threadIdx.x;
  const int m_block = blockIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const SeqRange seq = SeqRange::of(params, batch);
  if (m_block * kBlockM >= seq.seqlen_q) { return; }  // packed: past this sequence's rows (the grid covers the longest)
  Tensor cdQ = BwdEpilogue<Traits>::dq_coords(t);
  static_assert(decltype(size(cdQ))::value == 4 * kLoads, "a thread's fragment is its kLoads float4s");
  // The whole block is read: dq_accum's slack rows (kDqAccumRowPad) hold the rows past seqlen_q.
  const float4* accum = reinterpret_cast<const float4*>(BwdEpilogue<Traits>::dq_block(params, seq, head, batch, m_block));
  float4 a[kLoads];
  CUTE_UNROLL
  for (int g = 0; g < kLoads; ++g) { a[g] = accum[g * kThreads + t]; }
  const float s = params.softmax_scale;
  CUTE_UNROLL
  for (int g = 0; g < kLoads; ++g) {
    CUTE_UNROLL
    for (int half = 0; half < 2; ++half) {  // floats (4g, 4g + 1) and (4g + 2, 4g + 3): a column pair each
      const auto coord = cdQ(4 * g + 2 * half);
      cutlass::Array<float, 2> f{};
      f[0] = (half ? a[g].z : a[g].x) * s;
      f[1] = (half ? a[g].w : a[g].y) * s;
      cutlass::NumericArrayConverter<Element, float, 2> convert;
      const cutlass::Array<Element, 2> out = convert(f);
      *reinterpret_cast<uint32_t*>(&tile[get<0>(coord) * kPitch + get<1>(coord)]) = *reinterpret_cast<const uint32_t*>(&out);
    }
  }
  __syncthreads();

  // dq's rows start on 16-byte boundaries: bwd_can_run took the call only if TMA could address dq.
  const int rows_left = seq.seqlen_q - m_block * kBlockM;
  Element* dq = static_cast<Element*>(params.dq) + int64_t(batch) * params.dq_out_batch_stride +
                int64_t(head) * params.dq_out_head_stride + int64_t(seq.q_row0 + m_block * kBlockM) * params.dq_out_row_stride;
  constexpr int kVecsPerRow = kHeadDim / kVec;
  CUTE_UNROLL
  for (int i = t; i < kBlockM * kVecsPerRow; i += kThreads) {
    const int row = i / kVecsPerRow;
    const int col = i % kVecsPerRow * kVec;
    if (row < rows_left) {
      *reinterpret_cast<uint4*>(dq + int64_t(row) * params.dq_out_row_stride + col) =
          *reinterpret_cast<const uint4*>(&tile[row * kPitch + col]);
    }
  }
}

}  // namespace flashbuild::hopper
