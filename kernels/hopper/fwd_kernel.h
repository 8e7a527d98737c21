// The Hopper (sm_90a) FlashAttention forward kernel, composition only: a persistent CTA of one
// producer warpgroup and kBlockM / 64 consumer warpgroups walks the tiles the scheduler gives it.
// The producer's first warp loads (fwd_mainloop.h, load); the consumers compute (fwd_mainloop.h, mma),
// normalise (fwd_softmax.h) and store (fwd_epilogue.h). Tiles and registers in fwd_traits.h.
#pragma once

#include "common/index_errors.h"  // checked_index (FwdKernel::sequence)
#include "hopper/fwd_epilogue.h"
#include "hopper/fwd_mainloop.h"
#include "hopper/fwd_params.h"
#include "hopper/splitkv_dependent_launch.h"
#include "hopper/tile_scheduler.h"

namespace flashbuild::hopper {

template <class Traits, bool kIsCausal, int kFeatures>
struct FwdKernel {
  using Mainloop = FwdMainloop<Traits, kIsCausal, kFeatures>;
  using Epilogue = FwdEpilogue<Traits, kIsCausal>;  // causal: bottom-aligned tiles (sequence below)
  using Params = FwdKernelParams<Traits, kIsCausal, kFeatures>;  // fwd_params.h: what the host builds
  using Scheduler = typename Params::Scheduler;  // causal and local: longest first (tile_scheduler.h)
  using SharedStorage = typename Traits::SharedStorage;

  // Batch b's rows; causal query blocks end at the last row (SeqRange::bottom_aligned). The split-KV
  // kernel's keys are a KV cache's (common/params.h): cache row cache_batch_idx[b], from its
  // cache_leftpad[b]-th row, seqused_k[b] + seqlen_knew - cache_leftpad[b] of them (none when negative).
  // With index_check.at_read (no check kernel ran) these are the caller's values: each is clamped into its
  // range here, where it is read, and a bad one recorded, as the check kernel would (common/cache_index_check.h).
  CUTE_DEVICE static SeqRange sequence(FwdParams const& p, int batch) {
    SeqRange seq = SeqRange::of(p, batch);
    if constexpr (kIsSplitKV<kFeatures>) {
      int leftpad = p.cache_leftpad ? p.cache_leftpad[batch] : 0;
      int used = p.seqused_k ? p.seqused_k[batch] : p.seqlen_k;
      int row = p.cache_batch_idx ? p.cache_batch_idx[batch] : batch;
      const CacheIndexCheck& c = p.index_check;
      if (c.at_read) {
        leftpad = checked_index(leftpad, c.capacity, c.error, IndexArg::kCacheLeftpad, 0, batch);
        used = checked_index(used, c.capacity - p.seqlen_knew, c.error, IndexArg::kCacheSeqlens, 0, batch);
        row = checked_index(row, c.num_cache_rows - 1, c.error, IndexArg::kCacheBatchIdx, 0, batch);
      }
      seq.seqlen_k = used + p.seqlen_knew - leftpad;
      seq.k_row0 = leftpad;
      seq.k_batch = row;
    }
    if constexpr (kIsCausal) {
      return seq.bottom_aligned(Traits::kBlockM);
    } else {
      return seq;
    }
  }
};

// The TMA descriptors live in the kernel parameters (__grid_constant__), where the copy engine
// reads them directly.
template <class Traits, bool kIsCausal, int kFeatures>
__global__ void __launch_bounds__(Traits::kNThreads, Traits::kCtasPerSm)
    fwd_kernel(CUTE_GRID_CONSTANT typename FwdKernel<Traits, kIsCausal, kFeatures>::Params const params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Kernel = FwdKernel<Traits, kIsCausal, kFeatures>;
  using Mainloop = typename Kernel::Mainloop;
  using Epilogue = typename Kernel::Epilogue;
  using PipelineKV = typename Traits::PipelineKV;
  constexpr int kNumMmaThreads = Traits::kNumMmaThreads;

  extern __shared__ char smem_raw[];
  auto& storage = *reinterpret_cast<typename Kernel::SharedStorage*>(smem_raw);
  FwdParams const& p = params.fwd;

  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const int warpgroup = cutlass::canonical_warp_group_idx();  // 0: producer, 1..: consumers
  // K/V multicast (fwd_params.h, kMulticastKV): the launch runs this kernel in clusters of two CTAs or of one.
  constexpr bool kMulticast = Mainloop::kMulticast;
  const int cluster_ctas = kMulticast ? int(cute::cluster_shape().x) : 1;
  const typename Mainloop::KVShare share{cluster_ctas, !kMulticast || cute::block_rank_in_cluster() == 0};
  if (warp_idx == 0 && cute::elect_one_sync()) {
    Mainloop::prefetch_descriptors(params.mainloop);
    Epilogue::prefetch_descriptors(params.epilogue);
    cutlass::arch::ClusterTransactionBarrier::init(&storage.q_full, 1);
    if constexpr (Traits::kOAliasesV) { cutlass::arch::ClusterBarrier::init(&storage.o_read, kNumMmaThreads); }
    if constexpr (kMulticast) {  // one arrival each, from the second CTA's producer (FwdMainloop::load)
      for (int i = 0; i < Traits::kStages; ++i) {
        cutlass::arch::ClusterBarrier::init(&storage.peer_k[i], 1);
        cutlass::arch::ClusterBarrier::init(&storage.peer_v[i], 1);
      }
    }
  }

  // Both rings: one producer arrival (with the transaction bytes) fills a stage; every consumer
  // thread's release empties it. Warp 0 initialises the barriers. (In a cluster of two, a stage's bytes land in both
  // rings from the first CTA's copies: FwdMainloop::load.)
  typename PipelineKV::Params pipe_params;
  pipe_params.transaction_bytes = Traits::kKVTileBytes;
  pipe_params.role = warpgroup == 0 ? PipelineKV::ThreadCategory::Producer : PipelineKV::ThreadCategory::Consumer;
  pipe_params.is_leader = threadIdx.x == 0;
  pipe_params.num_consumers = kNumMmaThreads;
  PipelineKV pipe_k(storage.pipeline_k, pipe_params, Shape<_1, _1, _1>{});
  PipelineKV pipe_v(storage.pipeline_v, pipe_params, Shape<_1, _1, _1>{});
  // Barriers initialised and visible before anyone waits on them; in a cluster, before the other CTA's copies and
  // arrivals reach them.
  if (kMulticast && cluster_ctas > 1) {
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }
  // The split-KV launch may start while the previous kernel drains: nothing global before this.
  if constexpr (kIsSplitKV<kFeatures>) { dependent_launch_start(p.dependent_launch); }

  const typename Kernel::Scheduler& scheduler = params.scheduler;
  if (warpgroup == 0) {
    // Producer: registers go to the consumers. Only warp 0 works; the other three exit.
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (warp_idx == 0) {
      const bool leader = threadIdx.x == 0;  // also the pipelines' is_leader: one lane arms and loads
      // A paged cache's loads are a copy of the loop of their own (Mainloop::key_box), so the dense
      // loop has no page test: with one, the dense hdim-128 forward read 0.995-0.997 of the kernel
      // before in two runs, this way 1.001 (benchmarks/decode/README.md, "Paged chunks").
      auto produce = [&](auto paged) {
        auto write = cutlass::make_producer_start_state<PipelineKV>();
        bool first = true;
        uint32_t o_phase = 0;
        for (int t = scheduler.first_tile(); scheduler.valid(t); t = scheduler.next_tile(t)) {
          const TileCoord tile = scheduler.decode(t);
          const SeqRange seq = Kernel::sequence(p, tile.batch);
          if (!seq.has_rows(tile.m_block, Traits::kBlockM)) { continue; }  // the consumers skip it too
          Mainloop::template load<decltype(paged)::value>(params.mainloop, p, storage, pipe_k, pipe_v, write, tile,
                                                          seq, first, leader, o_phase, share);
          first = false;
        }
        // Match the consumers' release of the last tile's sQ (every tile's is waited on once).
        if (!first) { barrier_sync(FwdBarrier::kQueryEmpty, kNumMmaThreads + cutlass::NumThreadsPerWarp); }
      };
      if (p.block_table) {
        produce(cute::true_type{});
      } else {
        produce(cute::false_type{});
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    const int thread_idx = int(threadIdx.x) - kWarpgroupThreads;
    const int mma_warpgroup = warpgroup - 1;
    // Ping-pong: the first warpgroup takes the first turn.
    if constexpr (Traits::kPingpong) {
      if (mma_warpgroup == Traits::kNumMmaWarpgroups - 1) {
        barrier_arrive(warpgroup_turn(0), 2 * kWarpgroupThreads);
      }
    }
    const ScoreScale<kFeatures> score(p);
    typename PipelineKV::PipelineState read_k, read_v;
    uint32_t q_phase = 0;
    Tensor tOrO = make_tensor<float>(typename Mainloop::AccumulatorShapeO{});
    // Traits::kOAliasesV: this thread still owes the producer the release of the last tile's sO
    // (Epilogue::release_o), made early (after the epilogue) or late (under the next tile's first S).
    bool o_owed = false;
    auto release_o = [&] {
      if (o_owed) { Epilogue::release_o(storage, thread_idx); }
      o_owed = false;
    };
    auto tile_done = [&] {
      o_owed = Traits::kOAliasesV;
      if constexpr (!Traits::kReleaseOLate) { release_o(); }
    };
    for (int t = scheduler.first_tile(); scheduler.valid(t); t = scheduler.next_tile(t)) {
      const TileCoord tile = scheduler.decode(t);
      const SeqRange seq = Kernel::sequence(p, tile.batch);
      if (!seq.has_rows(tile.m_block, Traits::kBlockM)) { continue; }
      OnlineSoftmax<2, Mainloop::kMaxChains> softmax(score.scale_log2);
      // sQ is free for the next tile's Q as soon as the last S is computed.
      Mainloop::mma(
          p, storage, pipe_k, pipe_v, read_k, read_v, q_phase, tile, seq, thread_idx, mma_warpgroup, tOrO, softmax,
          score, [] { barrier_arrive(FwdBarrier::kQueryEmpty, kNumMmaThreads + cutlass::NumThreadsPerWarp); },
          [&] {
            if constexpr (Traits::kReleaseOLate) { release_o(); }
          });
      float lse[2];
      Tensor tOrO_rc = make_tensor(tOrO.data(), acc_rowcol(tOrO.layout()));
      softmax.finalize(tOrO_rc, score.scale, lse);
      if constexpr (kIsSplitKV<kFeatures>) {
        dependent_launch_tile_done(p.dependent_launch);
        if (tile.splits > 1) {  // chosen at run time: one kernel serves one split and several
          Epilogue::store_split(p, tile, seq, thread_idx, tOrO, lse);
          if (p.split_counters) { Epilogue::combine_if_last(p, tile, seq, scheduler.num_m_blocks, thread_idx); }
          tile_done();
          continue;
        }
      }
      Epilogue::store(params.epilogue, p, storage, tile, seq, thread_idx, tOrO, lse);
      tile_done();
    }
    Epilogue::drain(thread_idx);
  }
  // In a cluster, neither CTA leaves while the other may still arrive on its barriers or copy into its rings: every
  // thread of both meets here. (The cluster's size read again rather than held across the tiles.)
  if (kMulticast && cute::cluster_shape().x > 1) {
    cute::cluster_arrive();
    cute::cluster_wait();
  }
#else
  // Built for another target: this kernel needs sm_90a's wgmma, TMA and setmaxnreg.
  __trap();
#endif
}

// A launch reaches the kernel by its own symbol when its TU compiles it (fwd_params.h).
template <class Traits, bool kIsCausal, int kFeatures>
const KernelHandle& FwdKernelEntry<Traits, kIsCausal, kFeatures>::get() {
  static const KernelHandle kernel = KernelHandle::of(&fwd_kernel<Traits, kIsCausal, kFeatures>);
  return kernel;
}

}  // namespace flashbuild::hopper
