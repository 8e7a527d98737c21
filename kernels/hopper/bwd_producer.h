// The Hopper backward's producer warp (warp 0 of the producer warpgroup; one elected lane issues the copies): K and V
// once (TMA, one transaction barrier), then for every query block that sees these keys its Q and dO tiles (TMA) and
// its rows' LSE and dsum (plain loads, the whole warp) into one of kStages stages, the next block loading while the
// consumers (bwd_mainloop.h) work on this one; with BwdTraits::kDqInTurn (hdim 256's study form) dO has one stage of
// its own (load_q_then_do). Partial tiles: TMA zero-fills rows past the sequence; packed calls' rows past it hold the
// next sequence's, which this warp clears (clear_landed). A header of its own so that bwd_mainloop.h holds the
// consumers' step: BwdMainloop::load calls BwdProducer::load.
#pragma once

#include "common/params.h"          // kLog2e
#include "hopper/bwd_params.h"      // BwdLoads: the TMA descriptors the host builds
#include "hopper/bwd_traits.h"
#include "hopper/bwd_walk.h"  // BwdWalk: the order of the query blocks
#include "hopper/tile_scheduler.h"  // SeqRange, view_extents: where a packed call's sequences lie
#include "hopper/utils.h"           // tma_load_box, tma_load_tile, clear_rows

namespace flashbuild::hopper {

template <class Traits>
struct BwdProducer {
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kStages = Traits::kStages;
  using TileMD = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using Params = typename BwdLoads<Traits>::Params;

  // -DFLASHBUILD_HOPPER_BWD_PROBE_QDO, a timing probe (benchmarks/hopper_bwd_qdo_multicast/; the gradients come
  // out wrong): =1 the CTAs of odd blockIdx.x issue no Q and dO copies (their barriers pass on the arrivals alone,
  // the consumers read what the stages held), half the L2 reads of Q and dO, what sharing them between two CTAs
  // could save at most; =2 no CTA issues them. Dense calls only (a packed sequence's last box loads as before).
  // Without the define the test is the constant true.
#if defined(FLASHBUILD_HOPPER_BWD_PROBE_QDO) && FLASHBUILD_HOPPER_BWD_PROBE_QDO == 1
  CUTE_DEVICE static bool copies_qdo() { return (blockIdx.x & 1) == 0; }
#elif defined(FLASHBUILD_HOPPER_BWD_PROBE_QDO) && FLASHBUILD_HOPPER_BWD_PROBE_QDO == 2
  CUTE_DEVICE static bool copies_qdo() { return int(blockIdx.x) < 0; }
#else
  CUTE_DEVICE static constexpr bool copies_qdo() { return true; }
#endif

  // Packed calls: the rows of a box past its sequence's end hold the next sequence's rows (finite or
  // not). P and dS are 0 there, but the rows themselves enter dV, dK and dQ as operands, and 0 * NaN is
  // NaN: the producer warp clears them before the consumers may read the box. Such a box lands on its
  // own barrier (`landed`, once per CTA: only a sequence's last block of keys, or of queries, ends
  // inside the box); the warp waits for it, clears the rows, makes them visible to the tensor cores
  // and then arrives on the barrier the consumers wait on. Dense calls' boxes past the end are TMA's
  // zero fill, and the consumers' code is the same for both.
  template <class Barrier, class SmemA, class SmemB>
  CUTE_DEVICE static void clear_landed(Barrier* landed, int phase, SmemA sA, SmemB sB, int rows, int lane) {
    cutlass::arch::ClusterTransactionBarrier::wait(landed, phase);
    clear_rows<cutlass::NumThreadsPerWarp>(sA, rows, lane);
    clear_rows<cutlass::NumThreadsPerWarp>(sB, rows, lane);
    cutlass::arch::fence_view_async_shared();
    __syncwarp();
  }

  // The whole producer warp; lane 0 issues the copies and arms the barriers. The query blocks [m_block_min,
  // m_block_max) are those that see key block n_block (BwdMainloop::queries), loaded in the walk's order (kWraps:
  // from walk.m_first, BwdWalk).
  template <bool kWraps, class Storage>
  CUTE_DEVICE static void load(Params const& mp, BwdParams const& p, Storage& storage, SeqRange const& seq,
                               BwdWalk const& walk, int n_block, int head, int batch) {
    const int m_block_min = walk.m_block_min;
    const int m_block_max = walk.m_block_max;
    if (m_block_max <= m_block_min) { return; }
    const int lane = int(threadIdx.x) % cutlass::NumThreadsPerWarp;
    const bool leader = lane == 0;
    const int head_k = head / (p.nheads / p.nheads_k);

    const ViewExtents e = view_extents(p);
    Tensor mQ = mp.tma_q.get_tma_tensor(make_shape(e.rows_q, int32_t(kHeadDim), p.nheads, e.batches_q));
    Tensor mdO = mp.tma_do.get_tma_tensor(make_shape(e.rows_q, int32_t(kHeadDim), p.nheads, e.batches_q));
    Tensor mK = mp.tma_k.get_tma_tensor(make_shape(e.rows_k, int32_t(kHeadDim), p.nheads_k, e.batches_k));
    Tensor mV = mp.tma_v.get_tma_tensor(make_shape(e.rows_k, int32_t(kHeadDim), p.nheads_k, e.batches_k));
    Tensor sQ = make_tensor(make_smem_ptr(storage.q.data()), typename Traits::SmemLayoutQ{});
    Tensor sdO = make_tensor(make_smem_ptr(storage.d_o.data()), typename Traits::SmemLayoutdO{});
    Tensor sK = make_tensor(make_smem_ptr(storage.k.data()), typename Traits::SmemLayoutK{});
    Tensor sV = make_tensor(make_smem_ptr(storage.v.data()), typename Traits::SmemLayoutV{});
    // Q's and dO's tiles of this sequence and head: (M, D, m block) coordinates (utils.h, tma_load_tile).
    Tensor gQ = local_tile(domain_offset(make_coord(seq.q_row0, _0{}), mQ(_, _, head, seq.q_batch)), TileMD{},
                           make_coord(_, _0{}));
    Tensor gdO = local_tile(domain_offset(make_coord(seq.q_row0, _0{}), mdO(_, _, head, seq.q_batch)), TileMD{},
                            make_coord(_, _0{}));

    const int k_rows = seq.seqlen_k - n_block * kBlockN;
    const bool clear_kv = p.cu_seqlens_k && k_rows < kBlockN;  // see clear_landed
    auto* kv_barrier = clear_kv ? &storage.kv_landed : &storage.kv_full;
    if (leader) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(kv_barrier, Traits::kKVBytes);
      tma_load_box<kBlockN>(mp.tma_k.with(*kv_barrier), mK, seq.k_row0 + n_block * kBlockN, head_k, seq.k_batch, sK);
      tma_load_box<kBlockN>(mp.tma_v.with(*kv_barrier), mV, seq.k_row0 + n_block * kBlockN, head_k, seq.k_batch, sV);
    }
    if (clear_kv) {
      clear_landed(&storage.kv_landed, 0, sK, sV, k_rows, lane);
      if (leader) { cutlass::arch::ClusterBarrier::arrive(&storage.kv_full); }
    }

    // LSE and dsum: (batch, heads, seqlen_q), or (heads, total_q) packed (lse_batch_stride 0).
    const int64_t stats = int64_t(batch) * p.lse_batch_stride + seq.q_row0 + int64_t(head) * p.lse_head_stride;
    if constexpr (Traits::kDqInTurn) {
      CUTE_NO_UNROLL
      for (int slot = m_block_min; slot < m_block_max; ++slot) {
        const int iter = slot - m_block_min;
        const int m_block = kWraps ? walk.at(iter) : slot;
        cutlass::arch::ClusterBarrier::wait(&storage.qdo_empty[iter % kStages], ((iter / kStages) & 1) ^ 1);
        const int q_rows = seq.seqlen_q - m_block * kBlockM;
        const bool landed = p.cu_seqlens_q && q_rows < kBlockM;  // see clear_landed
        load_q_then_do(mp, p, storage, gQ, gdO, sQ, sdO, stats, m_block, iter, q_rows, landed, lane);
      }
    } else {
      CUTE_NO_UNROLL
      for (int slot = m_block_min; slot < m_block_max; ++slot) {
        const int iter = slot - m_block_min;
        const int m_block = kWraps ? walk.at(iter) : slot;
        const int stage = iter % kStages;
        // The consumers released this stage's previous block (a fresh barrier passes parity 1).
        cutlass::arch::ClusterBarrier::wait(&storage.qdo_empty[stage], ((iter / kStages) & 1) ^ 1);
        const int q_rows = seq.seqlen_q - m_block * kBlockM;
        const bool landed = p.cu_seqlens_q && q_rows < kBlockM;  // see clear_landed
        if constexpr (Traits::kTmaFirst) {
          // The copies first: lane 0 arms the bytes without arriving (its arrival comes with the others',
          // after the stores below), so the barrier cannot pass before every lane's rows are in.
          if (!landed && leader) {
            cutlass::arch::ClusterTransactionBarrier::expect_transaction(&storage.qdo_full[stage], Traits::kQdOStageBytes);
            tma_load_tile<kBlockM>(mp.tma_q.with(storage.qdo_full[stage]), gQ(_, _, m_block), sQ(_, _, stage));
            tma_load_tile<kBlockM>(mp.tma_do.with(storage.qdo_full[stage]), gdO(_, _, m_block), sdO(_, _, stage));
          }
        }
        CUTE_UNROLL
        for (int i = lane; i < kBlockM; i += cutlass::NumThreadsPerWarp) {
          const int row = m_block * kBlockM + i;
          const bool valid = row < seq.seqlen_q;
          storage.lse_log2[stage][i] = valid ? p.lse[stats + row] * float(kLog2e) : INFINITY;
          storage.dsum[stage][i] = valid ? p.dsum[stats + row] : 0.f;
        }
        // Every lane arrives (its stores released by the arrival); lane 0 also arms the bytes.
        if (landed) {
          if (leader) {
            cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&storage.qdo_landed, Traits::kQdOStageBytes);
            tma_load_tile<kBlockM>(mp.tma_q.with(storage.qdo_landed), gQ(_, _, m_block), sQ(_, _, stage));
            tma_load_tile<kBlockM>(mp.tma_do.with(storage.qdo_landed), gdO(_, _, m_block), sdO(_, _, stage));
          }
          clear_landed(&storage.qdo_landed, 0, sQ(_, _, stage), sdO(_, _, stage), q_rows, lane);
          cutlass::arch::ClusterBarrier::arrive(&storage.qdo_full[stage]);
        } else if (!Traits::kTmaFirst && leader && copies_qdo()) {
          cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&storage.qdo_full[stage], Traits::kQdOStageBytes);
          tma_load_tile<kBlockM>(mp.tma_q.with(storage.qdo_full[stage]), gQ(_, _, m_block), sQ(_, _, stage));
          tma_load_tile<kBlockM>(mp.tma_do.with(storage.qdo_full[stage]), gdO(_, _, m_block), sdO(_, _, stage));
        } else {
          cutlass::arch::ClusterBarrier::arrive(&storage.qdo_full[stage]);
        }
      }
    }
  }

  // kDqInTurn (one dO stage, bwd_traits.h): block m_block's Q and its rows' LSE and dsum on the Q stage's barrier (every
  // lane arrives, lane 0 with Q's bytes), then, once the consumers' dV products have read the previous block's dO, its
  // dO on the dO stage's own barrier. A box that ends past its packed sequence loads both onto qdo_landed after that
  // wait (the sequence's last block), and both barriers pass once the rows are cleared.
  template <class Storage, class GQ, class GdO, class SQ, class SdO>
  CUTE_DEVICE static void load_q_then_do(Params const& mp, BwdParams const& p, Storage& storage, GQ const& gQ,
                                         GdO const& gdO, SQ& sQ, SdO& sdO, int64_t stats, int m_block, int iter,
                                         int q_rows, bool landed, int lane) {
    const int stage = iter % kStages;
    const bool leader = lane == 0;
    CUTE_UNROLL
    for (int i = lane; i < kBlockM; i += cutlass::NumThreadsPerWarp) {
      const int row = m_block * kBlockM + i;
      const bool valid = i < q_rows;
      storage.lse_log2[stage][i] = valid ? p.lse[stats + row] * float(kLog2e) : INFINITY;
      storage.dsum[stage][i] = valid ? p.dsum[stats + row] : 0.f;
    }
    if (landed) {
      cutlass::arch::ClusterBarrier::wait(&storage.do_empty, (iter & 1) ^ 1);
      if (leader) {
        cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&storage.qdo_landed, Traits::kQdOStageBytes);
        tma_load_tile<kBlockM>(mp.tma_q.with(storage.qdo_landed), gQ(_, _, m_block), sQ(_, _, stage));
        tma_load_tile<kBlockM>(mp.tma_do.with(storage.qdo_landed), gdO(_, _, m_block), sdO(_, _, 0));
      }
      clear_landed(&storage.qdo_landed, 0, sQ(_, _, stage), sdO(_, _, 0), q_rows, lane);
      cutlass::arch::ClusterBarrier::arrive(&storage.qdo_full[stage]);
      if (leader) { cutlass::arch::ClusterBarrier::arrive(&storage.do_full); }
      return;
    }
    const bool copies = copies_qdo();
    if (leader && copies) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&storage.qdo_full[stage], Traits::kTileBytes);
      tma_load_tile<kBlockM>(mp.tma_q.with(storage.qdo_full[stage]), gQ(_, _, m_block), sQ(_, _, stage));
    } else {
      cutlass::arch::ClusterBarrier::arrive(&storage.qdo_full[stage]);
    }
    cutlass::arch::ClusterBarrier::wait(&storage.do_empty, (iter & 1) ^ 1);
    if (leader && copies) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&storage.do_full, Traits::kTileBytes);
      tma_load_tile<kBlockM>(mp.tma_do.with(storage.do_full), gdO(_, _, m_block), sdO(_, _, 0));
    } else if (leader) {
      cutlass::arch::ClusterBarrier::arrive(&storage.do_full);
    }
  }
};

}  // namespace flashbuild::hopper
