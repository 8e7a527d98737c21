// The Hopper (sm_90a) FlashAttention backward kernel, composition only: one CTA per (key block of
// kBlockN rows, head, batch), one producer warpgroup (warp 0 loads: bwd_mainloop.h, load; warp 1,
// with DqOrder::kFragmentBulk, adds each query block's dQ to dq_accum: bwd_epilogue.h, dq_writer)
// and two consumer warpgroups (bwd_mainloop.h, mma) that keep dK and dV in registers over every
// query block that sees their keys, hand each block's dQ on (bwd_epilogue.h, add_dq) and store dK,
// dV at the end. Tiles and registers in bwd_traits.h. Causal: key block 0 sees the most query
// blocks: the grid's first CTAs take it, longest first across sections of a few heads (bwd_params.h,
// bwd_lpt_section). kFeatures: a local window and softcap
// compiled in (bwd_mainloop.h; each stays off in a call that does not ask for it). kOrdered: the deterministic mode's
// instantiation (launched when BwdParams::dq_semaphore is set): the CTAs of one query block add its dQ in
// turn, and a causal or local grid takes its key blocks last first (common/bwd_dq_order.h; bwd_epilogue.h,
// add_dq and dq_writer). An instantiation of its own, so the default kernel's code is the one without the
// mode: a runtime branch on the pointer, even confined to the dQ writer warp, moved ptxas's schedule of
// the consumers' loop and cost the default mode 2-5 % at hdim 64/128 non-causal (H200, in turns against
// the kernel before the mode: benchmarks/bwd_deterministic/).
#pragma once

#include "hopper/bwd_epilogue.h"
#include "hopper/bwd_mainloop.h"
#include "hopper/bwd_params.h"

namespace flashbuild::hopper {

template <class Traits, bool kIsCausal, int kFeatures>
struct BwdKernel {
  using Mainloop = BwdMainloop<Traits, kIsCausal, kFeatures>;
  using Epilogue = BwdEpilogue<Traits, kIsCausal>;
  using SharedStorage = typename Traits::SharedStorage;

  using Params = BwdKernelParams<Traits>;  // bwd_params.h: what the host builds
};

// A study build's timeline of the backward's CTAs (benchmarks/bwd_timeline/README.md): with
// -DFLASHBUILD_SPLITKV_TIMELINE=1 (the split-KV's recorder, common/timeline.h, named for its first user: its buffer,
// its environment variable) each CTA writes %globaltimer into its record (kTimelineWords words at its linear index):
// kEntry by the first consumer thread at the kernel's start, kMmaStart / kMmaEnd around the consumers' main loop
// (BwdMainloop::mma: the K/V wait, the first Q/dO stage, every step), kDkvEnd after dK / dV are stored, kWriterEnd and
// kProducerEnd as the dQ writer warp and the producer warp leave; kWhere its SM, kCoords its key block, head, batch and
// query blocks. Without the define the recorder is empty and compiles to nothing. Beside three of the times, %clock64
// (kClocks + slot): cycles that do not depend on the clock the card runs at.
struct BwdTimeline {
  enum Slot : int { kEntry = 0, kMmaStart = 1, kMmaEnd = 2, kDkvEnd = 3, kWriterEnd = 4, kProducerEnd = 5, kWhere = 6,
                    kCoords = 7 };
  static constexpr int kClocks = 8;  // kClocks + slot: %clock64 beside kMmaStart, kMmaEnd and kDkvEnd (one SM's cycles)
#if FLASHBUILD_SPLITKV_TIMELINE
  uint64_t* rec = nullptr;
  CUTE_DEVICE explicit BwdTimeline(uint64_t* buffer) {
    if (buffer != nullptr) {
      const uint64_t cta = blockIdx.x + uint64_t(gridDim.x) * (blockIdx.y + uint64_t(gridDim.y) * blockIdx.z);
      rec = buffer + cta * kTimelineWords;
    }
  }
  CUTE_DEVICE void record(Slot slot) const {
    if (rec) {
      rec[slot] = timeline_now();
      if (slot == kMmaStart || slot == kMmaEnd || slot == kDkvEnd) { rec[kClocks + slot] = timeline_clock(); }
    }
  }
  CUTE_DEVICE void where(int n_block, int head, int batch, int blocks) const {
    if (rec) {
      uint32_t smid;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
      rec[kWhere] = smid;
      rec[kCoords] = uint64_t(uint16_t(n_block)) | uint64_t(uint16_t(head)) << 16 | uint64_t(uint16_t(batch)) << 32 |
                     uint64_t(uint16_t(blocks)) << 48;
    }
  }
#else
  CUTE_DEVICE explicit BwdTimeline(std::nullptr_t) {}
  CUTE_DEVICE void record(Slot) const {}
  CUTE_DEVICE void where(int, int, int, int) const {}
#endif
};

template <class KernelParams>
CUTE_DEVICE auto bwd_timeline_buffer(KernelParams const& params) {
#if FLASHBUILD_SPLITKV_TIMELINE
  return params.timeline;
#else
  (void)params;
  return nullptr;
#endif
}

// Grid (ceil(seqlen_k / kBlockN), nheads, batch), or in a causal kernel's sections (key blocks x 2^s,
// nheads / 2^s, batch) with s = params.section_shift; packed calls: seqlen_k is the longest sequence's,
// and a CTA past its sequence's keys has no query blocks (it stores nothing). The TMA descriptors
// live in the kernel parameters (__grid_constant__).
template <class Traits, bool kIsCausal, int kFeatures, bool kOrdered>
__global__ void __launch_bounds__(Traits::kNThreads, 1)
    bwd_kernel(CUTE_GRID_CONSTANT typename BwdKernel<Traits, kIsCausal, kFeatures>::Params const params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Kernel = BwdKernel<Traits, kIsCausal, kFeatures>;
  using Mainloop = typename Kernel::Mainloop;
  using Epilogue = typename Kernel::Epilogue;

  extern __shared__ char smem_raw[];
  auto& storage = *reinterpret_cast<typename Kernel::SharedStorage*>(smem_raw);
  BwdParams const& p = params.bwd;
  const BwdTimeline timeline(bwd_timeline_buffer(params));  // a study build's; empty otherwise
  if (threadIdx.x == kWarpgroupThreads) { timeline.record(BwdTimeline::kEntry); }
  constexpr int kLptSection = bwd_lpt_section<Traits, kIsCausal, kOrdered>();
  int n_block = Mainloop::template n_block_of<kOrdered>(blockIdx.x, gridDim.x);
  int head = blockIdx.y;
  int batch = blockIdx.z;
  if constexpr (kLptSection != 0) {  // the launch laid the grid out in sections of heads (bwd_params.h)
    const BwdSectionCta cta = bwd_section_cta(int(blockIdx.x), int(blockIdx.y), params.section_shift);
    n_block = cta.n_block, head = cta.head;
  }

  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const int warpgroup = cutlass::canonical_warp_group_idx();  // 0: producer, 1, 2: consumers
  if (warp_idx == 0 && cute::elect_one_sync()) {
    Mainloop::prefetch_descriptors(params.mainloop);
    cutlass::arch::ClusterTransactionBarrier::init(&storage.kv_full, 1);
    cutlass::arch::ClusterTransactionBarrier::init(&storage.kv_landed, 1);
    cutlass::arch::ClusterTransactionBarrier::init(&storage.qdo_landed, 1);
    CUTE_UNROLL
    for (int s = 0; s < Traits::kStages; ++s) {
      // Filled by the producer warp (every lane arrives: its LSE/dsum stores; lane 0 with the
      // TMA bytes); emptied by every consumer thread.
      cutlass::arch::ClusterTransactionBarrier::init(&storage.qdo_full[s], cutlass::NumThreadsPerWarp);
      cutlass::arch::ClusterBarrier::init(&storage.qdo_empty[s], Traits::kNumMmaThreads);
    }
    if constexpr (Traits::kDqInTurn) {  // the one dO stage's pair: lane 0 fills it, every consumer thread empties it
      cutlass::arch::ClusterTransactionBarrier::init(&storage.do_full, 1);
      cutlass::arch::ClusterBarrier::init(&storage.do_empty, Traits::kNumMmaThreads);
    }
  }
  __syncthreads();  // barriers initialised before anyone waits on them

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (warp_idx == 0) {
      Mainloop::template load<kOrdered>(params.mainloop, p, storage, n_block, head, batch);
      if (threadIdx.x == 0) { timeline.record(BwdTimeline::kProducerEnd); }
    }
    if constexpr (Traits::kDqBulk) {
      if (warp_idx == 1) {
        const auto qs = Mainloop::template queries<kOrdered>(p, batch, n_block);
        Epilogue::template dq_writer<kOrdered, Mainloop::kStagger>(p, storage, qs.seq, Mainloop::blocks(p, qs.seq),
                                                                   n_block, head, batch, qs);
        if (threadIdx.x == cutlass::NumThreadsPerWarp) { timeline.record(BwdTimeline::kWriterEnd); }
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    const int thread_idx = int(threadIdx.x) - kWarpgroupThreads;
    // dK and dV: one (64 keys, d or d / 2) wgmma accumulator per warpgroup (accumulator.h, AccumulatorShape).
    Tensor tdKrdK = make_tensor<float>(AccumulatorShape<Traits::kDkvAtomN>{});
    Tensor tdVrdV = make_tensor<float>(AccumulatorShape<Traits::kDkvAtomN>{});
    clear(tdKrdK);
    clear(tdVrdV);
    const auto qs = Mainloop::template queries<kOrdered>(p, batch, n_block);
    if (thread_idx == 0) {
      timeline.where(n_block, head, batch, qs.m_block_max - qs.m_block_min);
      timeline.record(BwdTimeline::kMmaStart);
    }
    Mainloop::mma(p, storage, qs, n_block, thread_idx, tdKrdK, tdVrdV,
                  [&, seq = qs.seq, m_first = qs.m_first](int m_block, auto const& tdQrdQ) {
                    Epilogue::template add_dq<kOrdered>(p, storage, seq, Mainloop::blocks(p, seq), n_block, head,
                                                        batch, m_block, m_block == m_first, thread_idx, tdQrdQ);
                  });
    if (thread_idx == 0) { timeline.record(BwdTimeline::kMmaEnd); }
    Epilogue::store_dkv(p, storage, qs.seq, n_block, head, batch, thread_idx, tdKrdK, tdVrdV);
    if (thread_idx == 0) { timeline.record(BwdTimeline::kDkvEnd); }
  }
#else
  // Built for another target: this kernel needs sm_90a's wgmma, TMA and setmaxnreg.
  __trap();
#endif
}

// A launch reaches the main kernel by its own symbol when its TU compiles it (bwd_params.h).
template <class Traits, bool kIsCausal, int kFeatures, bool kOrdered>
const KernelHandle& BwdKernelEntry<Traits, kIsCausal, kFeatures, kOrdered>::get() {
  static const KernelHandle kernel = KernelHandle::of(&bwd_kernel<Traits, kIsCausal, kFeatures, kOrdered>);
  return kernel;
}

}  // namespace flashbuild::hopper
