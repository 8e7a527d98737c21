// What leaves the backward kernel:
//   dQ per step: each consumer thread adds its fp32 share of the block's dS K into dq_accum, in
//   the order Traits::kDqOrder says (bwd_traits.h): row-major, two adjacent columns per vector
//   reduction (red.global.add.v2.f32), rows past seqlen_q skipped; or in fragment order, four
//   floats per reduction (red.global.add.v4.f32), the block's slack rows taking the padded rows'
//   zeros.
//   Deterministic mode (kOrdered: the kernel instantiation that BwdParams::dq_semaphore selects): the
//   CTAs that add into one query block take turns (common/bwd_dq_order.h: the order, its counters, why
//   it cannot deadlock). With kFragmentBulk only the dQ writer warp waits and hands on; otherwise the
//   consumers wait at add_dq.
//   dK (times the softmax scale) and dV at the end, in the input dtype, per query head, as BwdParams asks:
//   staged in shared memory (stage_dkv), then copied out in 16-byte pieces by every consumer thread (kDkvVector,
//   hdim 64-192) or by bulk copies, one per key row (kStagedDkv alone, hdim 256); rows past seqlen_k skipped.
// The kernels after it (dq = softmax_scale * dq_accum in the input dtype) are bwd_dq_accum.h's: the launch TU
// compiles them, and this header is the main kernel's alone.
#pragma once

#include "common/bwd_dq_order.h"  // dq_counter, spin_until_turn, release_turn: deterministic mode's turns
#include "hopper/accumulator.h"
#include "hopper/bwd_dq_accum.h"  // DqAccumLayout
#include "hopper/bwd_traits.h"
#include "hopper/bwd_walk.h"  // BwdWalk: the dQ writer's order of the query blocks
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

template <class Traits, bool kIsCausal = false>
struct BwdEpilogue {
  using Element = typename Traits::Element;
  using Layout = DqAccumLayout<Traits>;  // bwd_dq_accum.h: where each block and value of dQ lives
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  // kStagedDkv: dK and dV leave through shared memory and bulk copies (stage_dkv), not from registers (store_dkv's
  // own loop). In turns on the H200 (benchmarks/hopper_bwd_dkv_tma, calls h200-1 and h200-2, fp16 and bf16, causal or
  // not, 1k / 4k / 16k): hdim 128 1.051-1.064 / 1.017-1.029 / 1.002-1.009x; 192 and 256 1.060-1.085 / 1.014-1.035 /
  // 1.003-1.013x; 96 1.012-1.038 / 1.002-1.018x, at 16k causal 1.008x, non-causal 0.992x (a trade, kept); hdim 64
  // 0.926-0.982x: off there. nvcc -DFLASHBUILD_HOPPER_BWD_DKV_TMA=0 or 1 sets it for every head dim of a build (A/B
  // runs).
  // kDkvVector: dK and dV staged as kStagedDkv stages them, then copied out by every consumer thread as 16-byte shared
  // loads and 16-byte global stores (a warp's stores whole rows), in place of the bulk copies (one lane a warp issuing
  // a copy a row) and of the register path's 4-byte stores (a warp's store touching 8 rows). A CTA's timeline on the
  // H200 (benchmarks/bwd_timeline/): the epilogue 2.7-3.8 µs of every CTA (1.2-1.4 steps at hdim 64 / 128) before;
  // at hdim 64 1.25-1.41 µs with it. In turns (hopper_bwd_untimed/, h200-7 and h200-8, fp16 and bf16, 1k / 4k / 16k)
  // against the tree's epilogue: hdim 64 non-causal 1.065-1.071 / 1.019 / 1.001-1.010x, causal 1.076-1.077 /
  // 1.009-1.011 but 0.974-0.983x at 16k; hdim 96 1.036-1.055 / 1.011-1.023 / 1.004-1.007x, 128 1.027-1.033 /
  // 1.011-1.015 / 1.003-1.005x, 192 1.008-1.011 / 1.001-1.005 / 1.002-1.008x; hdim 256 0.996-1.009x: not taken.
  // hdim 64 causal's 16k loss was ptxas's: with the copy-out unrolled it scheduled that kernel's step otherwise (no
  // exponential left under dP^T's product, against 6), and its step ran ~2.5 % slower. With the copy-out a rolled loop
  // (kDkvVectorRolled) the step is the register path's less one spill reload, and the kernel ran 1.092 / 1.031 /
  // 1.008x the register path (benchmarks/hopper_bwd_bench_turns/, fp16, 5 rounds in flashbuild bench's protocol).
  // nvcc -DFLASHBUILD_HOPPER_BWD_DKV_VEC=0 or 1 sets kDkvVector for every head dim of a build and
  // -DFLASHBUILD_HOPPER_BWD_DKV_VEC_LOOP=0 or 1 kDkvVectorRolled (A/B runs); the define
  // -DFLASHBUILD_HOPPER_BWD_DKV_TMA alone keeps its own study's meaning (the bulk copies or the registers, no vectors).
#if defined(FLASHBUILD_HOPPER_BWD_DKV_VEC)
  static constexpr bool kDkvVector = FLASHBUILD_HOPPER_BWD_DKV_VEC != 0;
#elif defined(FLASHBUILD_HOPPER_BWD_DKV_TMA)
  static constexpr bool kDkvVector = false;
#else
  static constexpr bool kDkvVector = kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192;
#endif
  // The copy-out a rolled loop: only where timed (hdim 64 causal). At hdim 64 non-causal and 128 it also moves ptxas's
  // schedule of the step (cuobjdump -sass), untimed.
#if defined(FLASHBUILD_HOPPER_BWD_DKV_VEC_LOOP)
  static constexpr bool kDkvVectorRolled = FLASHBUILD_HOPPER_BWD_DKV_VEC_LOOP != 0;
#else
  static constexpr bool kDkvVectorRolled = kHeadDim == 64 && kIsCausal;
#endif
#ifdef FLASHBUILD_HOPPER_BWD_DKV_TMA
  static constexpr bool kStagedDkv = kDkvVector || FLASHBUILD_HOPPER_BWD_DKV_TMA != 0;
#else
  static constexpr bool kStagedDkv = kDkvVector || kHeadDim >= 96;
#endif

  // kDqHybrid (kDqHalves; benchmarks/hopper_bwd_dq_hybrid/): outside deterministic mode only warpgroup 0's half of dQ
  // goes through sdQ and the writer warp's bulk reduction; warpgroup 1 adds its half from registers
  // (red.global.add.v4.f32 at the same vectors of dq_accum). At hdim 256 (kDqInTurn) warpgroup 1 then never waits for
  // the writer to have read warpgroup 0's half. Deterministic mode keeps both halves on the writer (its turns).
  // On the H200, in turns with both halves on the writer (flashbuild bench's protocol, 1k / 4k / 16k): hdim 256
  // 1.029-1.034x non-causal and 1.006-1.022x causal in fp16, 1.017-1.036x in bf16 (the consumers' atomics for both
  // halves: 0.975-1.001x); hdim 64 causal 1.010-1.027x in fp16 and bf16; hdim 96 non-causal 1.011-1.028x (h200-6).
  // Not taken: hdim 64 non-causal (0.992-0.998x from 4k), hdim 96 causal (0.977-0.992x) and hdim 128 (0.952-0.984x).
  // nvcc -DFLASHBUILD_HOPPER_BWD_DQ_HYBRID=0 turns it off, =2 takes it to every kernel with kDqHalves (hdim 64, 96,
  // 128, 256), for A/B runs.
  static constexpr bool kDqHybridByDefault =
      Traits::kDqInTurn || (kHeadDim == 64 && kIsCausal) || (kHeadDim == 96 && !kIsCausal);
#if defined(FLASHBUILD_HOPPER_BWD_DQ_HYBRID)
  static constexpr bool kDqHybrid = Traits::kDqHalves && (FLASHBUILD_HOPPER_BWD_DQ_HYBRID == 2 ||
                                                          (FLASHBUILD_HOPPER_BWD_DQ_HYBRID == 1 && kDqHybridByDefault));
#else
  static constexpr bool kDqHybrid = Traits::kDqHalves && kDqHybridByDefault;
#endif
  static constexpr int kDqWriterThreads = Traits::kNumMmaThreads + cutlass::NumThreadsPerWarp;
  // The threads of one dQ hand-off barrier: the writer warp and the consumers whose dQ it takes (kDqHalves:
  // one warpgroup).
  static constexpr int kHandOffThreads = (Traits::kDqHalves ? kWarpgroupThreads : Traits::kNumMmaThreads) +
                                         cutlass::NumThreadsPerWarp;
  static constexpr int kHalves = Traits::kDqHalves ? Traits::kNumMmaWarpgroups : 1;
  // The halves of dQ the writer warp reduces a block: kDqHybrid outside deterministic mode warpgroup 0's alone
  // (warpgroup 1 adds its own).
  template <bool kOrdered>
  static constexpr int kWriterTurns = kDqHybrid && !kOrdered ? 1 : kHalves;
  // -DFLASHBUILD_HOPPER_BWD_PROBE_NO_DQ=1, a timing probe (benchmarks/hopper_bwd_dq_probe/; dQ comes out zero): every
  // reduction into dq_accum, the consumers' atomics and the writer warp's bulk reductions, sits behind a test that is
  // false at run time (seqlen_q < 0) and that the compiler cannot fold: the dQ product, its hand-off and barriers stay,
  // the reductions' memory traffic goes. Without the define the test is the constant true.
  // =2: only the CTAs of even blockIdx.x reduce (half the traffic); =3: the writer warp's bulk reductions issued twice
  // (twice the traffic; dQ comes out doubled). Both timing only, as =1.
#if defined(FLASHBUILD_HOPPER_BWD_PROBE_NO_DQ) && FLASHBUILD_HOPPER_BWD_PROBE_NO_DQ == 1
  CUTE_DEVICE static bool dq_reduces(SeqRange const& seq) { return seq.seqlen_q < 0; }
#elif defined(FLASHBUILD_HOPPER_BWD_PROBE_NO_DQ) && FLASHBUILD_HOPPER_BWD_PROBE_NO_DQ == 2
  CUTE_DEVICE static bool dq_reduces(SeqRange const& seq) { return seq.seqlen_q < 0 || (blockIdx.x & 1) == 0; }
#else
  CUTE_DEVICE static constexpr bool dq_reduces(SeqRange const&) { return true; }
#endif
#if defined(FLASHBUILD_HOPPER_BWD_PROBE_NO_DQ) && FLASHBUILD_HOPPER_BWD_PROBE_NO_DQ == 3
  static constexpr int kDqProbeCopies = 2;
#else
  static constexpr int kDqProbeCopies = 1;
#endif
  CUTE_DEVICE static int dq_empty_barrier(int half) {
    return static_cast<int>(half ? BwdBarrier::kdQEmpty1 : BwdBarrier::kdQEmpty);
  }
  CUTE_DEVICE static int dq_full_barrier(int half) {
    return static_cast<int>(half ? BwdBarrier::kdQFull1 : BwdBarrier::kdQFull);
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
      // kDqHalves: this warpgroup's own pair of barriers with the writer warp.
      const int half = Traits::kDqHalves ? thread_idx / kWarpgroupThreads : 0;
      if constexpr (kDqHybrid && !kOrdered) {
        if (half != 0) {  // warpgroup 1's half from registers, at the vectors sdQ's bulk reduction would add
          add_dq_global(p, seq, head, batch, m_block, thread_idx, tdQrdQ);
          return;
        }
      }
      // kDqInTurn: sdQ holds one half, warpgroup 1's after the writer has read warpgroup 0's (every block, the
      // first too); each half's vectors start at sdQ's start.
      if (!first || (Traits::kDqInTurn && half != 0)) {
        cutlass::arch::NamedBarrier::sync(kHandOffThreads, dq_empty_barrier(half));
      }
      const int base = Traits::kDqInTurn ? half * Layout::kVecsPerThread * kWarpgroupThreads : 0;
      CUTE_UNROLL
      for (int g = 0; g < size(tdQrdQ) / 4; ++g) {
        *reinterpret_cast<float4*>(storage.dq + (Layout::vec(g, thread_idx) - base) * 4) =
            make_float4(tdQrdQ(4 * g), tdQrdQ(4 * g + 1), tdQrdQ(4 * g + 2), tdQrdQ(4 * g + 3));
      }
      cutlass::arch::fence_view_async_shared();  // generic-proxy stores, read next by the bulk copy
      cutlass::arch::NamedBarrier::arrive(kHandOffThreads, dq_full_barrier(half));
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

  // One bulk reduction (cp.reduce.async.bulk, in the writer's current bulk group) of `bytes` of fp32 from shared memory
  // at `smem` into dq_accum at `dst`, evict-last: the block's other key blocks add into the same bytes soon.
  CUTE_DEVICE static void bulk_add_evict_last(float* dst, uint32_t smem, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.add.f32 [%0], [%1], %2, %3;\n" ::"l"(
                     dst),
                 "r"(smem), "r"(bytes), "l"(uint64_t(cute::TMA::CacheHintSm90::EVICT_LAST))
                 : "memory");
  }

  // kFragmentBulk's dQ writer (one producer warp): per query block, once the consumers have written
  // sdQ, one bulk reduction adds it to the block's (contiguous) dq_accum slice; sdQ is handed back
  // once the copy has read it. Deterministic mode (kOrdered): the leader lane waits for the block's
  // turn before the reduction, and hands on once the reduction has completed (not only read sdQ); the
  // proxy fences order the bulk copy's (async proxy) adds with the counter's (generic proxy) acquire
  // and release.
  // The blocks come in the consumers' walk (kWraps: from walk.m_first, BwdWalk); `slot` counts the steps from
  // m_block_min, so that slot + 1 < m_block_max says another block follows.
  template <bool kOrdered, bool kWraps, class Storage, class Blocks>
  CUTE_DEVICE static void dq_writer(BwdParams const& p, Storage& storage, SeqRange const& seq, Blocks const& blocks,
                                    int n_block, int head, int batch, BwdWalk const& walk) {
    const bool leader = int(threadIdx.x) % cutlass::NumThreadsPerWarp == 0;
    constexpr uint32_t kBytes = kBlockM * kHeadDim * sizeof(float);
    const uint32_t smem = cute::cast_smem_ptr_to_uint(storage.dq);
    const int m_block_min = walk.m_block_min;
    const int m_block_max = walk.m_block_max;
    for (int slot = m_block_min; slot < m_block_max; ++slot) {
      const int m_block = kWraps ? walk.at(slot - m_block_min) : slot;
      if constexpr (kOrdered) {
        if (leader) {
          spin_until_turn(dq_counter(p, batch, head, m_block), blocks.turn(n_block, m_block));
          asm volatile("fence.proxy.async.global;\n" ::: "memory");
        }
      }
      if constexpr (Traits::kDqInTurn) {
        dq_in_turn<kOrdered>(seq, Layout::block(p, seq, head, batch, m_block), smem,
                             kOrdered ? dq_counter(p, batch, head, m_block) : nullptr, slot, m_block_max,
                             kBytes / kHalves, leader);
        continue;
      } else if constexpr (Traits::kDqHalves) {
        // Each warpgroup's half by its own reduction, as soon as that warpgroup has written it; each half
        // handed back once its reduction has read it.
        constexpr int kTurns = kWriterTurns<kOrdered>;
        constexpr uint32_t kHalfBytes = kBytes / kHalves;
        float* dst = Layout::block(p, seq, head, batch, m_block);
        CUTE_UNROLL
        for (int h = 0; h < kTurns; ++h) {
          cutlass::arch::NamedBarrier::sync(kHandOffThreads, dq_full_barrier(h));
          if (leader) {
            if (dq_reduces(seq)) {
              CUTE_UNROLL
              for (int copy = 0; copy < kDqProbeCopies; ++copy) {
                bulk_add_evict_last(dst + h * (kHalfBytes / sizeof(float)), smem + h * kHalfBytes, kHalfBytes);
              }
            }
            cute::tma_store_arrive();
          }
        }
        if constexpr (kOrdered) {
          if (leader) {
            asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
            asm volatile("fence.proxy.async.global;\n" ::: "memory");
            release_turn(dq_counter(p, batch, head, m_block));
          }
          __syncwarp();
          if (slot + 1 < m_block_max) {
            CUTE_UNROLL
            for (int h = 0; h < kHalves; ++h) { cutlass::arch::NamedBarrier::arrive(kHandOffThreads, dq_empty_barrier(h)); }
          }
        } else {
          if (leader) { cute::tma_store_wait<kTurns - 1>(); }  // the first half has been read
          __syncwarp();
          if (slot + 1 < m_block_max) { cutlass::arch::NamedBarrier::arrive(kHandOffThreads, dq_empty_barrier(0)); }
          if constexpr (kTurns > 1) {
            if (leader) { cute::tma_store_wait<0>(); }
            __syncwarp();
            if (slot + 1 < m_block_max) {
              CUTE_UNROLL
              for (int h = 1; h < kTurns; ++h) {
                cutlass::arch::NamedBarrier::arrive(kHandOffThreads, dq_empty_barrier(h));
              }
            }
          }
        }
        continue;
      }
      cutlass::arch::NamedBarrier::sync(kDqWriterThreads, static_cast<int>(BwdBarrier::kdQFull));
      if (leader) {
        if (dq_reduces(seq)) {
          asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                           Layout::block(p, seq, head, batch, m_block)),
                       "r"(smem), "r"(kBytes)
                       : "memory");
        }
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
      if (slot + 1 < m_block_max) {
        cutlass::arch::NamedBarrier::arrive(kDqWriterThreads, static_cast<int>(BwdBarrier::kdQEmpty));
      }
    }
    // The last reductions complete before the warp ends. Ending after their reads alone (as each block already
    // waits) ran 0.998-1.001x at hdim 64, 128 and 256: not on the CTA's critical path (hopper_bwd_untimed/, h200-5).
    if (leader) { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }  // the last reduction is done
  }

  // kDqInTurn's writer for one block: warpgroup 0's half, read from sdQ, then sdQ handed to warpgroup 1, whose half
  // is read next; sdQ goes back to warpgroup 0 when another block follows (dq_writer's `slot`). Deterministic mode:
  // the turn (taken by the caller) is handed on once both reductions have completed.
  // kDqHybrid outside deterministic mode: warpgroup 0's half alone (kWriterTurns).
  template <bool kOrdered>
  CUTE_DEVICE static void dq_in_turn(SeqRange const& seq, float* dst, uint32_t smem, int* counter, int slot,
                                     int m_block_max, uint32_t half_bytes, bool leader) {
    constexpr int kTurns = kWriterTurns<kOrdered>;
    CUTE_UNROLL
    for (int h = 0; h < kTurns; ++h) {
      cutlass::arch::NamedBarrier::sync(kHandOffThreads, dq_full_barrier(h));
      if (leader) {
        if (dq_reduces(seq)) {
          CUTE_UNROLL
          for (int copy = 0; copy < kDqProbeCopies; ++copy) {
            bulk_add_evict_last(dst + h * (half_bytes / sizeof(float)), smem, half_bytes);
          }
        }
        cute::tma_store_arrive();
        if (kOrdered && h == kTurns - 1) {
          asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");  // both halves' adds are done
          asm volatile("fence.proxy.async.global;\n" ::: "memory");
          release_turn(counter);
        } else {
          cute::tma_store_wait<0>();  // the reduction has read sdQ
        }
      }
      __syncwarp();
      if (h + 1 < kTurns) {
        cutlass::arch::NamedBarrier::arrive(kHandOffThreads, dq_empty_barrier(h + 1));
      } else if (slot + 1 < m_block_max) {  // another block follows
        cutlass::arch::NamedBarrier::arrive(kHandOffThreads, dq_empty_barrier(0));
      }
    }
  }

  template <class FragDq>
  CUTE_DEVICE static void add_dq_global(BwdParams const& p, SeqRange const& seq, int head, int batch, int m_block,
                                        int thread_idx, FragDq const& tdQrdQ) {
    Tensor cdQ = Layout::coords(thread_idx);
    Tensor acc_rc = make_tensor(tdQrdQ.data(), acc_rowcol(tdQrdQ.layout()));
    Tensor c_rc = make_tensor(cdQ.data(), acc_rowcol(cdQ.layout()));
    static_assert(decltype(size<1, 0>(acc_rc))::value == 2, "expects column pairs");
    float* dq = Layout::block(p, seq, head, batch, m_block);
    if constexpr (Traits::kDqFragmentOrder) {
      // Float 4g + j of thread t at (g * kNumMmaThreads + t) * 4 + j: a warp's vectors are contiguous.
      static_assert(decltype(size(tdQrdQ))::value % 4 == 0, "fragment order moves four floats at a time");
      if (!dq_reduces(seq)) { return; }
      CUTE_UNROLL
      for (int g = 0; g < size(tdQrdQ) / 4; ++g) {
        atomic_add4(dq + Layout::vec(g, thread_idx) * 4, tdQrdQ(4 * g), tdQrdQ(4 * g + 1),
                    tdQrdQ(4 * g + 2), tdQrdQ(4 * g + 3));
      }
      return;
    }
    if (!dq_reduces(seq)) { return; }
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

  // dK (scaled here) and dV of this CTA's keys, in the input dtype: staged in shared memory and stored by bulk copies
  // (kStagedDkv, stage_dkv below), or straight from registers, two columns per 4-byte store, rows past seqlen_k
  // skipped.
  template <class Storage, class FragKV>
  CUTE_DEVICE static void store_dkv(BwdParams const& p, Storage& storage, SeqRange const& seq, int n_block, int head,
                                    int batch, int thread_idx, FragKV& tdKrdK, FragKV const& tdVrdV) {
    CUTE_UNROLL
    for (int i = 0; i < size(tdKrdK); ++i) { tdKrdK(i) *= p.softmax_scale; }
    Tensor rdK = convert_type<Element>(tdKrdK);
    Tensor rdV = convert_type<Element>(tdVrdV);
    typename Traits::TiledMmadKV mma_dkv;
    Tensor c = accumulator_coords<Traits::kDkvAtomN, Traits::kKeyWarpgroups, Traits::kColWarpgroups>(
        mma_dkv.get_thr_layout_vmnk().get_flat_coord(thread_idx));
    Tensor c_rc = make_tensor(c.data(), acc_rowcol(c.layout()));
    Tensor dk_rc = make_tensor(rdK.data(), acc_rowcol(rdK.layout()));
    Tensor dv_rc = make_tensor(rdV.data(), acc_rowcol(rdV.layout()));
    if constexpr (kStagedDkv) {
      stage_dkv(p, storage, seq, n_block, head, batch, thread_idx, c_rc, dk_rc, dv_rc);
    } else {
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
  }
  // kStagedDkv (benchmarks/hopper_bwd_dkv_tma/): dK (scaled) and dV, converted, staged in shared memory,
  // row-major with a 16-byte pad a row, then one bulk copy (cp.async.bulk global <- shared, no tensor map) per key row
  // of the sequence, issued by one lane of each consumer warp (2 kBlockN / 8 copies each): the register path's 4-byte
  // STG.E (64 a thread at hdim 128) become 4-byte shared stores (STS; FA3 uses STSM into a swizzled tile and one TMA
  // store) and one UBLKCP a row. Per row, so a partial last key block and a packed (varlen) sequence store only their
  // own rows: the next sequence's rows, which share the tensor, are never written. The CTA is not persistent, so
  // after the main loop K, V and the Q stages are free; the staging takes K's bytes onward (K, V and Q are adjacent:
  // each a multiple of 1024 bytes, alignas(1024)). The pad puts a warp's 4-byte stores (8 rows x 4 column pairs) in
  // 32 distinct banks: the row pitch, kHeadDim * 2 + 16 bytes, is 4 banks mod 32 at hdim 64/128/192/256 (20 at 96).
  // The bulk copy needs 16-byte aligned global rows: can_run (bwd_launch.h) already asks that of dK and dV.
  static constexpr int kStagePitch = kHeadDim * int(sizeof(Element)) + 16;  // bytes
  static constexpr int kRowBytes = kHeadDim * int(sizeof(Element));

  template <class Storage, class Coords, class Frag>
  CUTE_DEVICE static void stage_dkv(BwdParams const& p, Storage& storage, SeqRange const& seq, int n_block, int head,
                                    int batch, int thread_idx, Coords const& c_rc, Frag const& dk_rc, Frag const& dv_rc) {
    static_assert(sizeof(storage.k) % 1024 == 0 && sizeof(storage.v) % 1024 == 0, "K, V and Q must be adjacent");
    static_assert(2 * kBlockN * kStagePitch <= sizeof(storage.k) + sizeof(storage.v) + sizeof(storage.q),
                  "dK and dV staged must fit in K, V and the Q stages");
    static_assert(kRowBytes % 16 == 0, "a bulk copy moves multiples of 16 bytes");
    char* stage = reinterpret_cast<char*>(storage.k.data());
    constexpr int kBarrier = static_cast<int>(BwdBarrier::kdKVStaged);
    // Both warpgroups' last products (which read K, Q and dS from shared memory) are done before any row is written.
    cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, kBarrier);
    CUTE_UNROLL
    for (int r = 0; r < size<0>(c_rc); ++r) {
      const int row = get<0>(c_rc(r, 0));
      CUTE_UNROLL
      for (int col = 0; col < size<1>(c_rc); col += 2) {
        const int at = row * kStagePitch + get<1>(c_rc(r, col)) * int(sizeof(Element));
        *reinterpret_cast<uint32_t*>(stage + at) = *reinterpret_cast<uint32_t const*>(&dk_rc(r, col));
        *reinterpret_cast<uint32_t*>(stage + kBlockN * kStagePitch + at) =
            *reinterpret_cast<uint32_t const*>(&dv_rc(r, col));
      }
    }
    cutlass::arch::fence_view_async_shared();  // generic-proxy stores, read next by the bulk copies
    cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, kBarrier);
    const int64_t offset = int64_t(batch) * p.dk_batch_stride + int64_t(head) * p.dk_head_stride;
    const int rows_left = seq.seqlen_k - n_block * kBlockN;
    if constexpr (kDkvVector) {
      // Staging row i < kBlockN: dK's row i, then dV's; chunk c of a row: its bytes [16 c, 16 c + 16). Consecutive
      // threads take consecutive chunks, so a warp reads and writes whole rows (conflict-free: a quarter warp's
      // loads are 128 contiguous bytes of one row).
      constexpr int kChunksRow = kRowBytes / 16;
      constexpr int kChunks = 2 * kBlockN * kChunksRow;
      static_assert(kChunks % Traits::kNumMmaThreads == 0, "whole chunks a thread");
      const int64_t row0 = int64_t(seq.k_row0 + n_block * kBlockN);
      // Rolled or unrolled (kDkvVectorRolled): through ptxas, that choice reaches the main loop's schedule.
      constexpr int kUnroll = kDkvVectorRolled ? 1 : kChunks / Traits::kNumMmaThreads;
#pragma unroll kUnroll
      for (int i = 0; i < kChunks / Traits::kNumMmaThreads; ++i) {
        const int id = i * Traits::kNumMmaThreads + thread_idx;
        const int staged = id / kChunksRow, chunk = id % kChunksRow;
        const int row = staged % kBlockN;
        if (row < rows_left) {
          const uint4 v = *reinterpret_cast<uint4 const*>(stage + staged * kStagePitch + chunk * 16);
          Element* dst = static_cast<Element*>(staged < kBlockN ? p.dk : p.dv) + offset +
                         (row0 + row) * p.dk_row_stride + chunk * (16 / int(sizeof(Element)));
          *reinterpret_cast<uint4*>(dst) = v;
        }
      }
      return;
    }
    const uint32_t smem = cute::cast_smem_ptr_to_uint(stage);
    // One lane a warp issues its warp's share of the copies: a bulk copy's operands live in uniform registers,
    // so copies of per-thread addresses would be serialised over the warp's lanes anyway.
    constexpr int kCopiesPerWarp = 2 * kBlockN / (Traits::kNumMmaThreads / cutlass::NumThreadsPerWarp);
    static_assert(2 * kBlockN % (Traits::kNumMmaThreads / cutlass::NumThreadsPerWarp) == 0, "rows split by warp");
    const int first = (thread_idx / cutlass::NumThreadsPerWarp) * kCopiesPerWarp;
    if (cute::elect_one_sync()) {
      CUTE_NO_UNROLL
      for (int i = first; i < first + kCopiesPerWarp; ++i) {
        const int row = i % kBlockN;  // i < kBlockN: dK's rows, then dV's
        if (row < rows_left) {
          Element* dst = static_cast<Element*>(i < kBlockN ? p.dk : p.dv) + offset +
                         int64_t(seq.k_row0 + n_block * kBlockN + row) * p.dk_row_stride;
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst),
                       "r"(smem + uint32_t(i * kStagePitch)), "r"(uint32_t(kRowBytes))
                       : "memory");
        }
      }
      cute::tma_store_arrive();  // commit the warp's bulk group
      cute::tma_store_wait<0>();  // it has read the staging before the CTA (and its shared memory) ends
    }
  }
};

}  // namespace flashbuild::hopper
