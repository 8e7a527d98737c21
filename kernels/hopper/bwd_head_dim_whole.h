// The kHeadDim split's step in its kSdPWhole form (bwd_traits.h): warpgroup 0 computes S^T = K Q^T and warpgroup 1
// dP^T = V dO^T, each the whole (64 keys, kBlockM query rows) product, instead of each warpgroup half the query
// rows of both (bwd_mainloop.h, mma_head_dim).
// The hypothesis it was built to test (the timing below did not bear it out): every SS wgmma reads its A operand
// (64 rows of K or V, the whole head dim) from shared memory once per warpgroup, whatever its N. Split by query
// rows, both warpgroups read all of K and all of V in every step, for products of N = 32: per step 96 KB of
// operands for each of S^T and dP^T, against the 64 KB of a whole product (N = 64), at hdim 256; counting m64nNk16
// at N / 2 cycles and shared memory at 128 bytes a cycle, N = 32 with A from shared memory would be bound by shared
// memory at 1.5x the tensor cores' time.
// The cost: P^T (warpgroup 0's) reaches warpgroup 1 through shared memory (where it goes for dV anyway), read back
// with ldmatrix in the accumulator's own layout, so dS^T = P^T * (dP^T - dsum) takes the 16-bit P^T (the split
// form's takes the fp32 one: the gradients' bits differ from it); the exponentials are warpgroup 0's alone (the
// multiprocessor's MUFU rate is the same either way), and warpgroup 1 waits for them.
// A step: both issue their product and wait for it; warpgroup 0 computes P^T, stores it and arrives on kPFull;
// warpgroup 1 waits there, issues dV += P^T dO (its head-dim half) at once, reads P^T back, stores dS^T; after
// kdSFull both issue dQ = dS K and dK += dS^T Q (warpgroup 0 its dV too) on their halves of the head dim.
// Buffers: P^T and dS^T alternate between two (as in the split form); a buffer is rewritten two steps after it was
// read, and each write comes after a barrier that the reading warpgroup reached only after waiting for its reads
// (wgmma) or doing them (ldmatrix).
// kSFirst: warpgroup 1 issues dP^T's product only once warpgroup 0 has issued S^T's (a named barrier).
// Softcap kernels keep the split form (dS^T needs T = tanh(...) as well as P^T).
// Measured slower (a study form, off by default: bwd_traits.h, bwd_tile): on the H200 at hdim 256, in turns with the
// split form, 0.949-1.001x, with kSFirst 0.910-0.980x (fp16 and bf16, 1k-16k, causal or not;
// benchmarks/hopper_bwd_hdim256/): whatever the operand reads saved, the exponentials on one warpgroup with the
// other waiting cost more (not profiled).
#pragma once

#include <cute/arch/copy_sm75.hpp>  // ldmatrix

#include "common/numeric.h"  // convert_into
#include "hopper/accumulator.h"
#include "hopper/bwd_traits.h"
#include "hopper/utils.h"

namespace flashbuild::hopper {

// The inverse of stmatrix_accumulator (utils.h): ldmatrix (.x4, not transposed) from the addresses stmatrix_rows
// gives, into the registers of an accumulator converted to 16-bit elements, value for value.
template <class SmemRows, class Frag>
CUTE_DEVICE void ldmatrix_accumulator(SmemRows const& rows, Frag& frag) {
  using SmemLayout = remove_cvref_t<decltype(rows.layout())>;
  static_assert(decltype(rank(SmemLayout{}))::value == 2, "expects one (rows, cols) buffer");
  constexpr int kCols = decltype(size<1>(SmemLayout{}))::value;
  Tensor words = recast<uint32_t>(frag);
  static_assert(decltype(size(words))::value == kCols / 4, "expects 4 words per thread per 16 columns");
  CUTE_UNROLL
  for (int i = 0; i < kCols / 16; ++i) {
    auto const& src = reinterpret_cast<uint128_t const&>(*(rows.data() + SmemLayout{}(0, 16 * i)));
    SM75_U32x4_LDSM_N::copy(src, words(4 * i), words(4 * i + 1), words(4 * i + 2), words(4 * i + 3));
  }
}

// Mainloop: BwdMainloop (its Queries, walk, probabilities, smem_views); the rest as its mma_head_dim.
template <class Mainloop, class Storage, class FragKV, class AddDq>
CUTE_DEVICE void mma_head_dim_whole(BwdParams const& p, Storage& storage, typename Mainloop::Queries const& qs,
                                    int n_block, int thread_idx, FragKV& tdKrdK, FragKV& tdVrdV, AddDq&& add_dq) {
  using Traits = typename Mainloop::TraitsType;
  using Element = typename Traits::Element;
  using MmaSdP = typename Traits::TiledMmaSdPWhole;
  using MmadKV = typename Traits::TiledMmadKV;
  using MmadQ = typename Traits::TiledMmadQ;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kStages = Traits::kStages;
  constexpr int kNumMmaThreads = Traits::kNumMmaThreads;
  static_assert(Traits::kSplitHeadDim && Traits::kNumMmaWarpgroups == 2, "one product per consumer warpgroup");
  MmaSdP mma_sdp;
  MmadKV mma_dkv;
  MmadQ mma_dq;
  const int wg_thread = thread_idx % kWarpgroupThreads;
  const int part = thread_idx / kWarpgroupThreads;  // 0: S^T and P^T, 1: dP^T and dS^T
  const auto vmnk_sdp = mma_sdp.get_thr_layout_vmnk().get_flat_coord(wg_thread);
  const auto vmnk_dkv = mma_dkv.get_thr_layout_vmnk().get_flat_coord(thread_idx);
  const auto vmnk_dq = mma_dq.get_thr_layout_vmnk().get_flat_coord(thread_idx);

  const auto v = Mainloop::smem_views(storage);
  auto const& [sK, sV, sKt, sQ, sdO, sQt, sdOt, sdS, sdSt] = v;
  Tensor sP = make_tensor(make_smem_ptr(storage.p.data()), typename Traits::SmemLayoutP{});

  // This warpgroup's product: K and V are buffers of one layout, Q and dO too (bwd_traits.h).
  Tensor tSrA = MmaSdP::make_fragment_A(k_major_slices<kRowsPerWarpgroup>(part == 0 ? sK : sV, _0{}));
  Tensor tSrB = MmaSdP::make_fragment_B(k_major_slices<kBlockM>(part == 0 ? sQ : sdO, _0{}));  // (.., stage)
  Tensor tdVrP = MmadKV::make_fragment_A(k_major_slices<kRowsPerWarpgroup>(sP, get<1>(vmnk_dkv)));  // (.., buffer)
  Tensor tdKrdS = MmadKV::make_fragment_A(k_major_slices<kRowsPerWarpgroup>(sdS, get<1>(vmnk_dkv)));
  Tensor tdVrdOt = MmadKV::make_fragment_B(mn_major_slices<Traits::kDkvAtomN>(sdOt, get<2>(vmnk_dkv)));  // (.., stage)
  Tensor tdKrQt = MmadKV::make_fragment_B(mn_major_slices<Traits::kDkvAtomN>(sQt, get<2>(vmnk_dkv)));
  Tensor tdQrdS = MmadQ::make_fragment_A(mn_major_slices<kRowsPerWarpgroup>(sdSt, get<1>(vmnk_dq)));  // (.., buffer)
  Tensor tdQrKt = MmadQ::make_fragment_B(mn_major_slices<Traits::kDqAtomN>(sKt, get<2>(vmnk_dq)));
  // The whole (keys, query rows, buffer) tiles, a warp's 16 keys each: P^T (written by warpgroup 0, read back by
  // warpgroup 1) and dS^T (warpgroup 1).
  Tensor tPsP = stmatrix_rows<kWarpgroupThreads>(sP, wg_thread);
  Tensor tdSsdS = stmatrix_rows<kWarpgroupThreads>(sdS, wg_thread);
  // (key, query row) in the tile of each value of this warpgroup's S^T or dP^T.
  Tensor cS = accumulator_coords<kBlockM, 1>(vmnk_sdp);

  if (qs.m_block_max > qs.m_block_min) { cutlass::arch::ClusterTransactionBarrier::wait(&storage.kv_full, 0); }
  Mainloop::walk(qs, n_block, [&](int m_block, auto masked) {
    const int iter = m_block - qs.m_block_min;
    const int stage = iter % kStages;
    const int buffer = iter & 1;
    cutlass::arch::ClusterTransactionBarrier::wait(&storage.qdo_full[stage], (iter / kStages) & 1);

    Tensor tSrS = make_tensor<float>(AccumulatorShape<kBlockM>{});  // S^T (warpgroup 0) or dP^T (warpgroup 1)
    if constexpr (Traits::kSFirst) {
      // S^T's product ahead of dP^T's in the tensor cores' queue, so that it is done first and P^T's exponentials
      // run under dP^T's product (issued together, they share the tensor cores and end together).
      if (part == 1) { cutlass::arch::NamedBarrier::sync(kNumMmaThreads, static_cast<int>(BwdBarrier::kSIssued)); }
      wgmma<-1, false>(mma_sdp, tSrA, tSrB(_, _, _, stage), tSrS, true);
      if (part == 0) { cutlass::arch::NamedBarrier::arrive(kNumMmaThreads, static_cast<int>(BwdBarrier::kSIssued)); }
      warpgroup_wait<0>();
    } else {
      wgmma<0, false>(mma_sdp, tSrA, tSrB(_, _, _, stage), tSrS, true);
    }
    warpgroup_fence_operand(tSrS);
    Tensor rP = make_tensor<Element>(tSrS.layout());  // P^T, then (warpgroup 1) dS^T
    if (part == 0) {
      Mainloop::probabilities(p, qs, m_block, n_block, storage.lse_log2[stage], cS, tSrS, masked);
      convert_into(tSrS, rP);
      stmatrix_accumulator(tPsP(_, _, buffer), rP);
      cutlass::arch::fence_view_async_shared();
      cutlass::arch::NamedBarrier::arrive(kNumMmaThreads, static_cast<int>(BwdBarrier::kPFull));
    } else {
      cutlass::arch::NamedBarrier::sync(kNumMmaThreads, static_cast<int>(BwdBarrier::kPFull));
      wgmma<-1, false>(mma_dkv, tdVrP(_, _, _, buffer), tdVrdOt(_, _, _, stage), tdVrdV, false);
      ldmatrix_accumulator(tPsP(_, _, buffer), rP);
      float const* dsum = storage.dsum[stage];
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) { tSrS(i) = float(rP(i)) * (tSrS(i) - dsum[get<1>(cS(i))]); }
      convert_into(tSrS, rP);
      stmatrix_accumulator(tdSsdS(_, _, buffer), rP);
      cutlass::arch::fence_view_async_shared();
    }
    cutlass::arch::NamedBarrier::sync(kNumMmaThreads, static_cast<int>(BwdBarrier::kdSFull));

    // dQ = dS K first, so that its reductions leave while dK's product (and warpgroup 0's dV) runs. Its accumulator
    // lives from here to add_dq only (declared outside the loop, the fences would keep it live across steps).
    Tensor tdQrdQ = make_tensor<float>(AccumulatorShape<Traits::kDqAtomN>{});
    wgmma<-1, false>(mma_dq, tdQrdS(_, _, _, buffer), tdQrKt, tdQrdQ, true);
    if (part == 0) {
      wgmma<-1, false>(mma_dkv, tdVrP(_, _, _, buffer), tdVrdOt(_, _, _, stage), tdVrdV, false);
      wgmma<-1, false>(mma_dkv, tdKrdS(_, _, _, buffer), tdKrQt(_, _, _, stage), tdKrdK, false);
      warpgroup_wait<2>();  // dQ is ready
    } else {
      wgmma<-1, false>(mma_dkv, tdKrdS(_, _, _, buffer), tdKrQt(_, _, _, stage), tdKrdK, false);
      warpgroup_wait<1>();  // dV (issued before the barrier) and dQ are done
    }
    warpgroup_fence_operand(tdQrdQ);
    add_dq(m_block, tdQrdQ);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tdVrdV);
    warpgroup_fence_operand(tdKrdK);
    cutlass::arch::ClusterBarrier::arrive(&storage.qdo_empty[stage]);  // Q and dO are read
  });
}

}  // namespace flashbuild::hopper
