// The Ampere-path FlashAttention backward kernel. One CTA owns kBlockN keys of one (batch, head)
// and walks the query blocks that may see them, recomputing P from the forward LSE:
//   S = Q K^T, P = exp(S * scale - LSE), dP = dO V^T, dS = P * (dP - rowsum(dO * O)),
//   dV += P^T dO, dK += dS^T Q (in registers), dQ += dS K (fp32 atomics into dq_accum, issued
//   between the dV and dK products' MMAs; in deterministic mode, which the feature kernel alone
//   compiles, the CTAs of one query block issue theirs one after the other, in the order of
//   common/bwd_dq_order.h).
// P and dS go through shared memory because the dV/dK products read them transposed.
// With softcap, S becomes T = tanh(S * scale / softcap), P = exp(T * softcap - LSE), and dS picks
// up the derivative of the transform: dS = P * (dP - rowsum(dO * O)) * (1 - T^2).
#pragma once

#include "ampere/bwd_traits.h"
#include "common/block_info.h"
#include "common/bwd_dq_order.h"
#include "common/features.h"

namespace flashbuild::ampere {

// dst[0..3] += v (fp32, 16-byte aligned). On sm90 one vector reduction; four scalar atomics before.
CUTE_DEVICE void atomic_add4(float* dst, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(a), "f"(b), "f"(c), "f"(d));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
  atomicAdd(dst + 2, c);
  atomicAdd(dst + 3, d);
#endif
}

template <class Traits, bool kIsCausal, int kFeatures>
__global__ void __launch_bounds__(Traits::kNThreads) bwd_kernel(const __grid_constant__ BwdParams params) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  using TileMD = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileND = Shape<Int<kBlockN>, Int<kHeadDim>>;

  extern __shared__ char smem[];
  const int tidx = threadIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int head_k = head / (params.nheads / params.nheads_k);
  const SeqInfo info(batch, params.seqlen_q, params.seqlen_k, params.cu_seqlens_q, params.cu_seqlens_k, nullptr);
  const int seqlen_q = info.seqlen_q;
  const int seqlen_k = info.seqlen_k;
  if (int(blockIdx.x) * kBlockN >= seqlen_k) { return; }  // a shorter sequence of a packed batch
  const auto mask = make_mask<kIsCausal, kFeatures>(params, seqlen_q, seqlen_k);
  // Deterministic mode, a uniform branch on one flag (the path without it reads the flag, and with a
  // right mask edge selects its key block by it): the CTAs that visit a query block add their dQ in
  // turn, and CTA x may take another key block than x (bwd_dq_order.h). Compiled into the feature
  // kernel only (kOrderedDq), the one that serves every call with a runtime option: the mode's code in
  // the plain kernel's function cost it up to 4.6 % at hdim 128 (benchmarks/bwd_deterministic), so the
  // plain kernel has none of it and the binding sends deterministic calls to the feature kernel.
  constexpr bool kOrderedDq = kFeatures != kNoFeatures;
  const bool ordered = kOrderedDq && params.dq_semaphore != nullptr;
  const BwdBlocks<decltype(mask), kBlockM, kBlockN> blocks{mask, (seqlen_k + kBlockN - 1) / kBlockN};
  const int n_block = blocks.n_block_of(blockIdx.x, ordered);
  const ScoreScale<kFeatures> score_scale(params);
  const int64_t row_stat_offset = info.row_stat_offset(params.lse_batch_stride, params.lse_head_stride, head);

  // Global tiles.
  auto rows_of = [](auto* ptr, int rows, int64_t row_stride) {
    return make_tensor(make_gmem_ptr(ptr), make_shape(rows, Int<kHeadDim>{}), make_stride(row_stride, _1{}));
  };
  const auto* q = static_cast<const Element*>(params.q) + info.q_offset(params.q_batch_stride, params.q_row_stride) +
                  head * params.q_head_stride;
  const auto* d_o = static_cast<const Element*>(params.dout) +
                    info.q_offset(params.do_batch_stride, params.do_row_stride) + head * params.do_head_stride;
  const auto* k = static_cast<const Element*>(params.k) + info.k_offset(params.k_batch_stride, params.k_row_stride) +
                  head_k * params.k_head_stride;
  const auto* v = static_cast<const Element*>(params.v) + info.k_offset(params.v_batch_stride, params.v_row_stride) +
                  head_k * params.v_head_stride;
  auto* dk = static_cast<Element*>(params.dk) + info.k_offset(params.dk_batch_stride, params.dk_row_stride) +
             head * params.dk_head_stride;
  auto* dv = static_cast<Element*>(params.dv) + info.k_offset(params.dk_batch_stride, params.dk_row_stride) +
             head * params.dk_head_stride;
  float* dq = params.dq_accum + info.dq_accum_offset(params.dq_batch_stride, kHeadDim) + head * params.dq_head_stride;
  Tensor gQ = local_tile(rows_of(q, seqlen_q, params.q_row_stride), TileMD{}, make_coord(_, 0));      // (M, D, mb)
  Tensor gdO = local_tile(rows_of(d_o, seqlen_q, params.do_row_stride), TileMD{}, make_coord(_, 0));  // (M, D, mb)
  Tensor gK = local_tile(rows_of(k, seqlen_k, params.k_row_stride), TileND{}, make_coord(n_block, 0));
  Tensor gV = local_tile(rows_of(v, seqlen_k, params.v_row_stride), TileND{}, make_coord(n_block, 0));
  Tensor gdK = local_tile(rows_of(dk, seqlen_k, params.dk_row_stride), TileND{}, make_coord(n_block, 0));
  Tensor gdV = local_tile(rows_of(dv, seqlen_k, params.dk_row_stride), TileND{}, make_coord(n_block, 0));

  // Shared tiles: K, V, P, dS, then kStages buffers of (Q, dO) and their rows' LSE and dsum.
  Tensor sK = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutKV{});
  Tensor sP = make_tensor(sV.data() + size(sV), typename Traits::SmemLayoutPdS{});
  Tensor sdS = make_tensor(sP.data() + size(sP), typename Traits::SmemLayoutPdS{});
  Tensor sQ0 = make_tensor(sdS.data() + size(sdS), typename Traits::SmemLayoutQdO{});
  constexpr int kStageElems = 2 * decltype(size(sQ0))::value;  // Q and dO of one stage
  float* s_stats = reinterpret_cast<float*>(
      smem + 2 * Traits::kSmemKVBytes + 2 * Traits::kSmemPdSBytes + Traits::kStages * 2 * Traits::kSmemQdOBytes);
  Tensor sKt = make_tensor(sK.data(), typename Traits::SmemLayoutKt{});
  Tensor sPt = make_tensor(sP.data(), typename Traits::SmemLayoutPdSt{});
  Tensor sdSt = make_tensor(sdS.data(), typename Traits::SmemLayoutPdSt{});
  auto stage_q = [&](int stage) {
    return make_tensor(sQ0.data() + stage * kStageElems, typename Traits::SmemLayoutQdO{});
  };
  auto stage_do = [&](int stage) {
    return make_tensor(sQ0.data() + stage * kStageElems + size(sQ0), typename Traits::SmemLayoutQdO{});
  };

  // Global -> shared.
  typename Traits::GmemTiledCopy gmem_copy;
  auto gmem_thr_copy = gmem_copy.get_thread_slice(tidx);
  Tensor tQgQ = gmem_thr_copy.partition_S(gQ);
  Tensor tdOgdO = gmem_thr_copy.partition_S(gdO);
  Tensor tKgK = gmem_thr_copy.partition_S(gK);
  Tensor tKsK = gmem_thr_copy.partition_D(sK);
  Tensor tVgV = gmem_thr_copy.partition_S(gV);
  Tensor tVsV = gmem_thr_copy.partition_D(sV);
  Tensor tQcQ = Traits::template gmem_coords<kBlockM>(tidx);  // (row, col) of each vector, for copy_rows
  Tensor tKcK = Traits::template gmem_coords<kBlockN>(tidx);

  // S and dP.
  typename Traits::TiledMmaSdP mma_sdp;
  auto thr_sdp = mma_sdp.get_thread_slice(tidx);
  Tensor tSrQ = thr_sdp.partition_fragment_A(sQ0);
  Tensor tSrK = thr_sdp.partition_fragment_B(sK);
  Tensor tdPrdO = thr_sdp.partition_fragment_A(sQ0);
  Tensor tdPrV = thr_sdp.partition_fragment_B(sV);
  auto copy_sdp_a = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, mma_sdp);
  auto thr_copy_sdp_a = copy_sdp_a.get_thread_slice(tidx);
  auto copy_sdp_b = make_tiled_copy_B(typename Traits::SmemCopyAtomSdPB{}, mma_sdp);
  auto thr_copy_sdp_b = copy_sdp_b.get_thread_slice(tidx);
  Tensor tSsK = thr_copy_sdp_b.partition_S(sK);
  Tensor tdPsV = thr_copy_sdp_b.partition_S(sV);
  Tensor tScS = Traits::sdp_coords(mma_sdp.get_thr_layout_vmnk().get_flat_coord(tidx));  // (row, col) of acc_s's values
  auto copy_pds = make_tiled_copy_C(typename Traits::SmemCopyAtomStore{}, mma_sdp);
  auto thr_copy_pds = copy_pds.get_thread_slice(tidx);
  Tensor tPsP = thr_copy_pds.partition_D(sP);
  Tensor tdSsdS = thr_copy_pds.partition_D(sdS);

  // dV and dK: both operands read transposed.
  typename Traits::TiledMmadKV mma_dkv;
  auto thr_dkv = mma_dkv.get_thread_slice(tidx);
  Tensor tdVrPt = thr_dkv.partition_fragment_A(sPt);
  Tensor tdVrdOt = thr_dkv.partition_fragment_B(make_tensor(sQ0.data(), typename Traits::SmemLayoutQdOt{}));
  Tensor tdKrdSt = thr_dkv.partition_fragment_A(sdSt);
  Tensor tdKrQt = thr_dkv.partition_fragment_B(make_tensor(sQ0.data(), typename Traits::SmemLayoutQdOt{}));
  auto copy_dkv_a = make_tiled_copy_A(typename Traits::SmemCopyAtomTransposed{}, mma_dkv);
  auto thr_copy_dkv_a = copy_dkv_a.get_thread_slice(tidx);
  Tensor tdVsPt = thr_copy_dkv_a.partition_S(sPt);
  Tensor tdKsdSt = thr_copy_dkv_a.partition_S(sdSt);
  auto copy_dkv_b = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, mma_dkv);
  auto thr_copy_dkv_b = copy_dkv_b.get_thread_slice(tidx);
  Tensor acc_dk = make_tensor<float>(typename Traits::AccShapedKV{});
  Tensor acc_dv = make_tensor<float>(typename Traits::AccShapedKV{});
  clear(acc_dk);
  clear(acc_dv);

  // dQ: dS as stored, K read transposed.
  typename Traits::TiledMmadQ mma_dq;
  auto thr_dq = mma_dq.get_thread_slice(tidx);
  Tensor tdQrdS = thr_dq.partition_fragment_A(sdS);
  auto sKt_chunk = [&](int c) {  // the rows of K^T (columns of dQ) of column chunk c
    return local_tile(sKt, Shape<Int<Traits::kDqCols>, Int<kBlockN>>{}, make_coord(c, 0));
  };
  Tensor tdQrKt = thr_dq.partition_fragment_B(sKt_chunk(0));
  auto copy_dq_a = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, mma_dq);
  auto thr_copy_dq_a = copy_dq_a.get_thread_slice(tidx);
  Tensor tdQsdS = thr_copy_dq_a.partition_S(sdS);
  auto copy_dq_b = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, mma_dq);
  auto thr_copy_dq_b = copy_dq_b.get_thread_slice(tidx);

  // Q, dO and their rows' LSE and dsum of one query block into one stage, all asynchronously.
  // Padding rows read as zeros: their Q and dO rows are 0, so whatever P they get, their dS and
  // their share of dV and dK are exactly 0 (their dQ rows go to dq_accum's slack, never converted).
  static_assert(kBlockM <= Traits::kNThreads, "one thread per query row loads the row statistics");
  const BlockRange visited = blocks.queries(n_block);
  const int m_block_min = visited.begin;
  const int m_block_max = visited.end;
  auto load_query_block = [&](int m_block, int stage) {
    const int q_rows = seqlen_q - m_block * kBlockM;
    Tensor tQsQ = gmem_thr_copy.partition_D(stage_q(stage));
    Tensor tdOsdO = gmem_thr_copy.partition_D(stage_do(stage));
    copy_rows(gmem_copy, tQgQ(_, _, _, m_block), tQsQ, tQcQ, q_rows);
    copy_rows(gmem_copy, tdOgdO(_, _, _, m_block), tdOsdO, tQcQ, q_rows);
    if (tidx < kBlockM) {
      float* stats = s_stats + stage * 2 * kBlockM;
      const int64_t row = row_stat_offset + m_block * kBlockM + (tidx < q_rows ? tidx : 0);
      cp_async_float(stats + tidx, params.lse + row, tidx < q_rows);
      cp_async_float(stats + kBlockM + tidx, params.dsum + row, tidx < q_rows);
    }
    cp_async_fence();
  };

  const int key_rows = seqlen_k - n_block * kBlockN;
  copy_rows(gmem_copy, tKgK, tKsK, tKcK, key_rows);
  copy_rows(gmem_copy, tVgV, tVsV, tKcK, key_rows);
  if (m_block_min < m_block_max) { load_query_block(m_block_min, 0); }
  cp_async_fence();

  // dQ of a query block, and its fp32 atomics (see the step below for where they go out). Declared
  // outside the step: the closure that issues them is then one type for the masked and the unmasked
  // step, so the dV and dK products (gemm_smem_smem with it as after_step) are instantiated once
  // each instead of once per step kind (benchmarks/edit_loop/, "The Ampere-path backward's products").
  Tensor acc_dq = make_tensor<float>(typename Traits::AccShapedQ{});
  constexpr int kVecs = decltype(size(acc_dq))::value / Traits::kDqVec;
  constexpr int kSlices = decltype(size<2>(tdKrdSt))::value;  // k-slices of each of dV and dK
  constexpr int kSteps = 2 * kSlices / Traits::kDqChunks;     // the k-slices one chunk spreads over
  constexpr int kVecsPerStep = (kVecs + kSteps - 1) / kSteps;
  // The adds of chunk c of the block at dq_block, from step first_step on: after_step of a product.
  auto dq_adds = [&](float* dq_block, int c, int first_step) {
    return [&, dq_block, c, first_step](int step) {
      CUTE_UNROLL
      for (int j = 0; j < kVecsPerStep; ++j) {
        const int g = (first_step + step) * kVecsPerStep + j;
        if (g < kVecs) {
          atomic_add4(dq_block + Traits::dq_accum_index(tidx, c, g), acc_dq(4 * g), acc_dq(4 * g + 1),
                      acc_dq(4 * g + 2), acc_dq(4 * g + 3));
        }
      }
    };
  };

  // One step: query block m_block, masked element-wise or not.
  auto step = [&](int m_block, auto masked) {
    const int stage = Traits::kStages == 1 ? 0 : (m_block - m_block_min) & 1;
    const bool has_next = m_block + 1 < m_block_max;
    cp_async_wait<0>();
    __syncthreads();  // this stage landed; every warp is done with the other stage, P and dS
    if constexpr (Traits::kStages == 2) {
      // The next query block streams into the other stage during this step's five products.
      if (has_next) { load_query_block(m_block + 1, stage ^ 1); }
    }
    Tensor sQ = stage_q(stage);
    Tensor sdO = stage_do(stage);
    const float* s_lse = s_stats + stage * 2 * kBlockM;
    const float* s_dsum = s_lse + kBlockM;

    Tensor acc_s = make_tensor<float>(typename Traits::AccShapeSdP{});
    clear(acc_s);
    gemm_smem_smem(acc_s, tSrQ, tSrK, thr_copy_sdp_a.partition_S(sQ), tSsK, mma_sdp, copy_sdp_a, copy_sdp_b,
                   thr_copy_sdp_a, thr_copy_sdp_b);
    Tensor acc_dp = make_tensor<float>(typename Traits::AccShapeSdP{});
    clear(acc_dp);
    gemm_smem_smem(acc_dp, tdPrdO, tdPrV, thr_copy_sdp_a.partition_S(sdO), tdPsV, mma_sdp, copy_sdp_a, copy_sdp_b,
                   thr_copy_sdp_a, thr_copy_sdp_b);
    score_scale.transform(acc_s);
    if constexpr (decltype(masked)::value) { mask.apply(acc_s, tScS, m_block * kBlockM, n_block * kBlockN); }
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) {
      const int row = get<0>(tScS(i));
      const float p = exp2_ftz(acc_s(i) * score_scale.scale_log2 - s_lse[row] * kLog2e);
      float ds = p * (acc_dp(i) - s_dsum[row]);
      if constexpr (kHasSoftcap<kFeatures>) {
        // A masked score is -inf here, and its p = 0: keep its dS 0, not 0 * (1 - inf).
        if (score_scale.softcap_on) { ds *= p == 0.f ? 0.f : 1.f - acc_s(i) * acc_s(i); }
      }
      acc_dp(i) = ds;
      acc_s(i) = p;
    }
    Tensor rP = convert_type<Element>(acc_s);
    Tensor rdS = convert_type<Element>(acc_dp);
    copy(copy_pds, thr_copy_pds.retile_S(rP), tPsP);
    copy(copy_pds, thr_copy_pds.retile_S(rdS), tdSsdS);
    __syncthreads();

    Tensor sQt = make_tensor(sQ.data(), typename Traits::SmemLayoutQdOt{});
    Tensor sdOt = make_tensor(sdO.data(), typename Traits::SmemLayoutQdOt{});
    // dQ = dS K, chunk by chunk; each chunk's fp32 atomics then go out a few per k-slice of the dV
    // and dK products (one chunk: across both; two: the first during dV, the second during dK):
    // issued in one burst they fill the global-memory queue and stall the warp (ncu: lg_throttle,
    // 2.9 cycles per instruction at hdim 256); spread, the tensor cores work meanwhile (16k: hdim
    // 128 290 -> 309 TFLOPS, hdim 256 210 -> 241, benchmarks/bwd_dq_atomics/). dq_accum holds
    // the block in fragment order (BwdTraits::dq_accum_index): four floats per atomic, a warp's
    // 512 bytes contiguous. The block is whole in dq_accum (its slack rows, BwdParams), so rows
    // past seqlen_q need no test: the conversion reads only the real ones.
    auto dq_chunk = [&](int c) {
      clear(acc_dq);
      gemm_smem_smem(acc_dq, tdQrdS, tdQrKt, tdQsdS, thr_copy_dq_b.partition_S(sKt_chunk(c)), mma_dq, copy_dq_a,
                     copy_dq_b, thr_copy_dq_a, thr_copy_dq_b);
    };
    float* dq_block = dq + m_block * (kBlockM * kHeadDim);
    // The chunk reduced during dK, and where its vectors resume: one chunk goes on past dV's.
    constexpr int kDkChunk = Traits::kDqChunks - 1;
    constexpr int kDkFirstStep = Traits::kDqChunks == 1 ? kSlices : 0;
    // Deterministic mode: this block's adds, spread over the dV and dK products as above, wait for
    // the turn of this key block (bwd_dq_order.h) and hand the block on after the last one. The
    // default path shares this code, so where each piece sits is about its registers: the turn is
    // searched before dQ's accumulators are live and only the result crosses dQ's product (searched
    // beside them, sm_90a hdim 64 spilled 152 bytes against 84 without the mode; here 80); the wait
    // follows that product, which so stays outside the serialized part; the counter's address is
    // formed in each branch from the parameters and blockIdx.
    int turn = 0;
    if (ordered) { turn = blocks.turn(n_block, m_block); }
    dq_chunk(0);
    if (ordered) { wait_for_turn(dq_counter(params, blockIdx.z, blockIdx.y, m_block), turn, tidx); }
    gemm_smem_smem(acc_dv, tdVrPt, tdVrdOt, tdVsPt, thr_copy_dkv_b.partition_S(sdOt), mma_dkv, copy_dkv_a,
                   copy_dkv_b, thr_copy_dkv_a, thr_copy_dkv_b, dq_adds(dq_block, 0, 0));
    if constexpr (kDkChunk > 0) { dq_chunk(kDkChunk); }
    gemm_smem_smem(acc_dk, tdKrdSt, tdKrQt, tdKsdSt, thr_copy_dkv_b.partition_S(sQt), mma_dkv, copy_dkv_a,
                   copy_dkv_b, thr_copy_dkv_a, thr_copy_dkv_b, dq_adds(dq_block, kDkChunk, kDkFirstStep));
    if (ordered) { pass_turn(dq_counter(params, blockIdx.z, blockIdx.y, m_block), tidx); }
    if constexpr (Traits::kStages == 1) {
      __syncthreads();  // the next step overwrites Q and dO in place
      if (has_next) { load_query_block(m_block + 1, 0); }
    }
  };

  // Masked and unmasked steps are separate code, as in the forward (fwd_kernel.h): hdim 64 causal
  // 7-10% faster than one body that branched around the masking (benchmarks/fwd_masked_steps/).
  // Peeling the masked steps off the loop measured the same here, so one loop serves every mask.
  for (int m_block = m_block_min; m_block < m_block_max; ++m_block) {
    if (mask.needs_mask(m_block, n_block, kBlockM, kBlockN)) {
      step(m_block, std::true_type{});
    } else {
      step(m_block, std::false_type{});
    }
  }

  // Epilogue: dK picks up the softmax scale; both go out through shared memory (K and V's space).
  CUTE_UNROLL
  for (int i = 0; i < size(acc_dk); ++i) { acc_dk(i) *= params.softmax_scale; }
  Tensor rdK = convert_type<Element>(acc_dk);
  Tensor rdV = convert_type<Element>(acc_dv);
  cp_async_wait<0>();  // with no query block to visit, K and V may still be in flight
  __syncthreads();
  Tensor sdK = make_tensor(sK.data(), typename Traits::SmemLayoutKV{});
  Tensor sdV = make_tensor(sV.data(), typename Traits::SmemLayoutKV{});
  auto copy_dkv_store = make_tiled_copy_C(typename Traits::SmemCopyAtomStore{}, mma_dkv);
  auto thr_copy_dkv_store = copy_dkv_store.get_thread_slice(tidx);
  copy(copy_dkv_store, thr_copy_dkv_store.retile_S(rdK), thr_copy_dkv_store.partition_D(sdK));
  copy(copy_dkv_store, thr_copy_dkv_store.retile_S(rdV), thr_copy_dkv_store.partition_D(sdV));
  __syncthreads();

  store_tile(typename Traits::GmemTiledCopyStore{}, tidx, sdK, gdK, key_rows);
  store_tile(typename Traits::GmemTiledCopyStore{}, tidx, sdV, gdV, key_rows);
}

}  // namespace flashbuild::ampere
