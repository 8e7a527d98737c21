// The backward main loop of one CTA (kBlockN keys of one (batch, head)), in its two roles.
//   Producer (one warp of the producer warpgroup; bwd_producer.h, BwdProducer): K and V once, then
//   for every query block that sees these keys its Q and dO tiles and its rows' LSE and dsum into
//   one of two stages, the next block loading while the consumers work on this one.
//   Consumers (two warpgroups; bwd_traits.h, BwdSplit): per query block S^T and dP^T (SS wgmma,
//   issued together), P^T and dS^T, dV += P^T dO and dK += dS^T Q, dS^T into shared memory and
//   dQ = dS K (SS wgmma), whose fp32 result is added to dq_accum (epilogue). kKeys (mma_keys): 64
//   keys each, P^T and dS^T stay in registers for dV and dK (RS wgmma). kHeadDim (mma_head_dim):
//   half the query rows each for S^T and dP^T, half the head dim for dK, dV and dQ; P^T goes
//   through shared memory too, and dV and dK are SS products.
// Partial tiles: TMA zero-fills Q/dO rows past seqlen_q and K/V rows past seqlen_k (packed calls: the
// producer clears those rows, which hold the next sequence's: clear_landed). A padded query row gets
// LSE +inf, so P = 0 there, and dsum 0; its dS and its share of dK, dV are exactly 0. Key rows past
// seqlen_k are masked to P = 0 and never stored.
// Features (kFeatures, common/features.h): a local window narrows each key block's query blocks
// (the mask's m_block_min / m_block_max) and masks both edges of the band element-wise; softcap turns
// S^T into T = tanh(S^T * softmax_scale / softcap) before the exponent and multiplies dS^T by the
// transform's derivative, 1 - T^2 (softcap_grads).
#pragma once

#include "common/bwd_dq_order.h"  // BwdBlocks: deterministic mode's turns (family-neutral: common/mask.h alone)
#include "common/features.h"      // the masks of a kernel's features, the softcap transform (shared with the forward)
#include "common/mask.h"
#include "hopper/accumulator.h"
#include "hopper/bwd_params.h"
#include "hopper/bwd_producer.h"  // the producer warp's loads (load)
#include "hopper/bwd_row_stats.h"  // a step's LSE / dsum in registers (kStatsForm 1, 2)
#include "hopper/bwd_traits.h"
#include "hopper/bwd_walk.h"  // BwdWalk: the order of a CTA's query blocks (kStagger)
#include "hopper/tile_scheduler.h"  // SeqRange, view_extents: where a packed call's sequences lie
#include "hopper/utils.h"

namespace flashbuild::hopper {

template <class Traits, bool kIsCausal, int kFeatures>
struct BwdMainloop {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kStages = Traits::kStages;
  static constexpr int kNumMmaThreads = Traits::kNumMmaThreads;
  using Mask = AttentionMask<kIsCausal, kHasLocal<kFeatures>>;  // a local mask ignores kIsCausal (features.h)
  using Score = ScoreScale<kFeatures>;
  // Causal (no local window): the query blocks of a key block that need the mask (those crossing the
  // diagonal, the first ceil(kBlockN / kBlockM) or one more from m_block_min; every one when the block
  // crosses seqlen_k) are a loop of their own, and the rest a loop with no mask code, instead of one loop
  // testing needs_mask every step (the forward's split, hopper/fwd_mainloop.h: kPeelMasked). needs_mask is
  // monotone here (true, then false, as m_block grows), so the masked loop runs while it holds and every
  // later step is provably unmasked. Each step body is a generic lambda with exactly two call sites, so
  // nvcc inlines it (benchmarks/fwd_masked_steps: a third put the accumulators on the stack).
  // Only at head dim 96, where it was measured faster (benchmarks/hopper_bwd_peel/: causal 1.013-1.029x in
  // turns on the H200, fp16 and bf16, 1k-16k). At 64 and 128 (the kKeys tiles at ptxas's register limit) the two
  // loops spill (nvcc 13.0: 60-132 bytes at 64, 72-80 at 128, against 4 and 0 in one loop) and ran 0.96x and
  // 0.87-0.92x; at 192 and 256 (kHeadDim) 0.996-1.003x and 0.977-0.987x. nvcc -DFLASHBUILD_HOPPER_BWD_PEEL=0
  // keeps the one loop everywhere (the kernel before that study), =2 peels every causal tile, for A/B runs.
#if defined(FLASHBUILD_HOPPER_BWD_PEEL)
  static constexpr bool kPeelMasked =
      kIsCausal && !kHasLocal<kFeatures> &&
      (FLASHBUILD_HOPPER_BWD_PEEL == 2 || (FLASHBUILD_HOPPER_BWD_PEEL == 1 && kHeadDim == 96));
#else
  static constexpr bool kPeelMasked = kIsCausal && !kHasLocal<kFeatures> && kHeadDim == 96;
#endif
  // Kernels without a right mask edge (neither causal nor local), kStagger: each CTA walks its query blocks from its
  // own place, key block n of a sequence's N from n / N of the way in, wrapping around (BwdWalk), not all from the
  // first. A non-causal grid runs a head's key blocks side by side, so in the plain order every CTA adds its dQ into
  // the same query block at a time; staggered, they add into different ones. (Deterministic mode keeps the plain
  // order: its turns follow the key blocks'.) On the H200, in turns with the plain order
  // (benchmarks/hopper_bwd_stagger/, h200-1, fp16 and bf16, every round): hdim 192 1.033-1.042x at 1k, 1.010-1.015x
  // at 4k and 16k; hdim 256 0.978-0.989x, as hdim 64 and 128 lost with it before (0.962-0.986x, 2026-11-26,
  // benchmarks/hopper_bwd_split/); hdim 96 fp16 1.012-1.022x at 1k, 0.992x at 4k, 1.000x at 16k (h200-3). So hdim
  // 192 alone. nvcc -DFLASHBUILD_HOPPER_BWD_STAGGER=0 keeps the plain order everywhere, =2 staggers hdim 256 too
  // (h200-1's arm), =3 every head dim (kKeys too: h200-3's arm), for A/B runs.
#if defined(FLASHBUILD_HOPPER_BWD_STAGGER)
  static constexpr bool kStagger =
      !Mask::kHasRightEdge &&
      (FLASHBUILD_HOPPER_BWD_STAGGER == 3 || (FLASHBUILD_HOPPER_BWD_STAGGER == 2 && Traits::kSplitHeadDim) ||
       (FLASHBUILD_HOPPER_BWD_STAGGER == 1 && kHeadDim == 192));
#else
  static constexpr bool kStagger = Traits::kSplitHeadDim && !Mask::kHasRightEdge && kHeadDim == 192;
#endif
  // kKeys, a study form (off by default): each thread's warpgroup coordinates in the products (which keys of K and
  // V, which rows of dS and columns of K^T a warpgroup reads) read from lane 0 of its warp (__shfl_sync, once per
  // CTA), so that ptxas knows them warp-uniform and builds the wgmma descriptors that depend on them in uniform
  // registers, as FlashAttention-3 does; derived from threadIdx, each step builds them in vector registers and
  // moves them over (cuobjdump -sass, nvcc 13.0, fp16 non-causal, per step: 48 R2UR and about 60 more vector
  // integer instructions at hdim 128, 538 -> 474 instructions with the form; 32 and about 45 at hdim 64, 743 ->
  // 698). Fewer instructions, yet slower: on the H200, in turns with the per-thread form, 0.976-0.994x at hdim 128
  // and 0.924-0.991x at hdim 64 (causal 0.924-0.968), fp16 1k-16k (benchmarks/hopper_bwd_uniform/).
  // nvcc -DFLASHBUILD_HOPPER_BWD_UNIFORM_WG=1 builds it at hdim 64 and 128, =2 at every kKeys head dim, =3 in the
  // kHeadDim step alone (hdim 192, 256: mma_head_dim), whose descriptors all depend on the warpgroup: at hdim 256 the
  // step goes from 517 instructions (88 R2UR) to 432, and ran 0.978-0.987x causal, 0.993-1.008x non-causal (the gain
  // at 16k only), hdim 192 0.999-1.007x (benchmarks/hopper_bwd_uniform/, h200-3): not taken either.
#if defined(FLASHBUILD_HOPPER_BWD_UNIFORM_WG)
  static constexpr bool kUniformWarpgroups =
      FLASHBUILD_HOPPER_BWD_UNIFORM_WG == 2 || (FLASHBUILD_HOPPER_BWD_UNIFORM_WG == 1 && kHeadDim != 96) ||
      (FLASHBUILD_HOPPER_BWD_UNIFORM_WG == 3 && Traits::kSplitHeadDim);
#else
  static constexpr bool kUniformWarpgroups = false;
#endif
  // kKeys, kernels without softcap: where a step gets each query row's LSE and dsum. Form 0 reads both from shared
  // memory where it uses them, after each wait (cuobjdump -sass: 16 + 16 LDS.64 a step at hdim 64, 8 + 8 at hdim
  // 128, the first of each a latency P^T / dS^T then waits for). Forms 1 and 2 load the LSE of the rows a thread's
  // S^T values hold right after issuing S^T's and dP^T's products and their dsum before waiting for dP^T's, into
  // registers, as FlashAttention-3's step does (tLSErLSE, tLSErdPsum): form 1 (kStatsInRegisters) one register per
  // row (16 + 16 at hdim 128; at hdim 64 its 32 + 32 spill 16 bytes), form 2 (kStatsShuffled) a thread's rows spread
  // over the 8 lanes that share them and fetched by __shfl_sync (FA3's ShuffleLSE / ShuffledPsum at hdim <= 64):
  // 4 + 4 registers and 64 SHFL a step at hdim 64, whose kernels then have no spill (4 bytes in form 0).
  // Form 2 is the default of the plain non-causal hdim-64 kernel only: on the H200, in turns with form 0, fp16, it ran
  // 1.026 / 1.022 / 1.012x there at 16k / 4k / 1k, but 0.957-0.983x causal, and at hdim 128 form 2 0.947-0.997x,
  // form 1 0.960-0.993x (benchmarks/hopper_bwd_uniform/). Kernels with softcap compiled in keep form 0
  // (softcap_grads reads both where it uses them); local-window kernels too (not timed).
  // nvcc -DFLASHBUILD_HOPPER_BWD_STATS=0 / 1 / 2 builds one form at every kKeys head dim but softcap kernels'.
#if defined(FLASHBUILD_HOPPER_BWD_STATS)
  static constexpr int kStatsForm = kHasSoftcap<kFeatures> ? 0 : FLASHBUILD_HOPPER_BWD_STATS;
#else
  static constexpr int kStatsForm = kHeadDim == 64 && !kIsCausal && kFeatures == 0 ? 2 : 0;
#endif
  // kHeadDim (hdim 192, 256): the LSE of the rows a thread's S^T values hold loaded into registers before the wait for
  // S^T, their dsum before the wait for dP^T (form 1's places; at hdim 256 both before the products, kStatsEarly
  // below), not read from shared memory after each wait. The default of the plain kernels at both head dims: on the
  // H200, in turns with form 0 (benchmarks/hopper_bwd_dq_hybrid/), hdim 256 1.004-1.020x fp16 and 1.005-1.029x bf16
  // at 1k-16k, causal or not (h200-4, h200-5; 168 registers, no spill), hdim 192 1.000-1.005x (h200-6). Untimed in
  // the feature kernels (those with softcap keep form 0 regardless). nvcc -DFLASHBUILD_HOPPER_BWD_STATS_HD=0 turns it
  // off, =2 takes it to every kHeadDim kernel without softcap, for A/B runs.
  static constexpr bool kStatsHeadDimByDefault = kFeatures == 0;
#if defined(FLASHBUILD_HOPPER_BWD_STATS_HD)
  static constexpr bool kStatsHeadDimRegisters =
      Traits::kSplitHeadDim && !kHasSoftcap<kFeatures> &&
      (FLASHBUILD_HOPPER_BWD_STATS_HD == 2 || (FLASHBUILD_HOPPER_BWD_STATS_HD == 1 && kStatsHeadDimByDefault));
#else
  static constexpr bool kStatsHeadDimRegisters = Traits::kSplitHeadDim && kStatsHeadDimByDefault;
#endif
  // kStatsHeadDimRegisters: where the step issues those loads. 0: the LSE once S^T's and dP^T's products are issued,
  // dsum after the wait for S^T. 1: the LSE before the products are issued; 2: both. ncu's source page of the
  // hdim-256 kernel at 0 (benchmarks/hopper_bwd_dq_hybrid/, ncu-h200-2) put 8 % of its stall samples on the first
  // FFMA that reads the LSE (short scoreboard), its loads issued after 31 of the 32 wgmma (a reading: they wait
  // behind the products' operand reads of shared memory). On the H200, in turns against 0 (h200-7), 2 at hdim 256:
  // 1.011-1.016x non-causal and 1.005-1.007x causal in fp16, 1.008-1.021x and 1.002-1.008x in bf16 (every round
  // 1.001 or more); 1: 0.994-1.005x. At hdim 192 (h200-8) 2 ran 0.989-1.003x. So 2 at hdim 256, 0 at 192.
  // nvcc -DFLASHBUILD_HOPPER_BWD_STATS_EARLY=0|1|2 sets it for every kernel with kStatsHeadDimRegisters (A/B runs).
#if defined(FLASHBUILD_HOPPER_BWD_STATS_EARLY)
  static constexpr int kStatsEarly = kStatsHeadDimRegisters ? FLASHBUILD_HOPPER_BWD_STATS_EARLY : 0;
#else
  static constexpr int kStatsEarly = kStatsHeadDimRegisters && kHeadDim == 256 ? 2 : 0;
#endif
  static constexpr bool kStatsInRegisters = kStatsForm == 1;
  static constexpr bool kStatsShuffled = kStatsForm == 2;
  using RowStats = BwdRowStats<kBlockM, AccumulatorShape<Traits::kSdPAtomN>>;  // bwd_row_stats.h
  static_assert(!kStatsShuffled || RowStats::kShuffledPerLane * 8 == RowStats::kRowsPerThread,
                "8 lanes share a thread's rows");
  template <class Vmnk>
  CUTE_DEVICE static auto warpgroups_uniform(Vmnk const& vmnk) {
    static_assert(decltype(rank(vmnk))::value == 4, "(thread in the warpgroup, warpgroup in M, in N, in K)");
    if constexpr (kUniformWarpgroups) {
      auto lane0 = [](auto x) {
        if constexpr (cute::is_static<decltype(x)>::value) {
          return x;
        } else {
          return __shfl_sync(0xffffffff, x, 0);
        }
      };
      return make_coord(get<0>(vmnk), lane0(get<1>(vmnk)), lane0(get<2>(vmnk)), lane0(get<3>(vmnk)));
    } else {
      return vmnk;
    }
  }

  // Each consumer warpgroup's accumulators, one wgmma in M and N (accumulator.h): S^T and dP^T (64 keys,
  // kBlockM query rows), its share of dQ.
  using AccumulatorShapeSdP = AccumulatorShape<Traits::kSdPAtomN>;
  using AccumulatorShapedQ = AccumulatorShape<Traits::kDqAtomN>;

  // The TMA descriptors of Q, dO, K, V, which the host builds (bwd_params.h: the launch TU includes that
  // header, not this one).
  using Loads = BwdLoads<Traits>;
  using Params = typename Loads::Params;

  CUTE_DEVICE static void prefetch_descriptors(Params const& mp) { Loads::prefetch_descriptors(mp); }

  // This CTA's sequence, and the query blocks [m_block_min, m_block_max) that see some key of its
  // block: none when the block starts past the sequence's keys (a packed call's grid covers the
  // longest sequence); the walk over them starts at m_first (kStagger outside deterministic mode, kOrdered).
  struct Queries : BwdWalk {
    SeqRange seq;
    Mask mask;
  };
  template <bool kOrdered>
  CUTE_DEVICE static Queries queries(BwdParams const& p, int batch, int n_block) {
    const SeqRange seq = SeqRange::of(p, batch);
    Queries q{{0, 0, 0}, seq, make_mask<kIsCausal, kFeatures>(p, seq.seqlen_q, seq.seqlen_k)};
    q.m_block_min = q.mask.m_block_min(n_block, kBlockM, kBlockN);
    q.m_block_max = n_block * kBlockN < seq.seqlen_k ? q.mask.m_block_max(n_block, kBlockM, kBlockN) : q.m_block_min;
    q.m_first = q.m_block_min;
    if constexpr (kStagger && !kOrdered) { q.stagger(n_block, (seq.seqlen_k + kBlockN - 1) / kBlockN); }
    return q;
  }

  // Deterministic mode (BwdParams::dq_semaphore set): the key blocks of a sequence and their turns at
  // adding each query block's dQ, in the order common/bwd_dq_order.h lays down for both families.
  using Blocks = BwdBlocks<Mask, kBlockM, kBlockN>;
  CUTE_DEVICE static Blocks blocks(BwdParams const& p, SeqRange const& seq) {
    return {make_mask<kIsCausal, kFeatures>(p, seq.seqlen_q, seq.seqlen_k), (seq.seqlen_k + kBlockN - 1) / kBlockN};
  }

  // The key block CTA `cta` of a grid of n_ctas takes: its own index, except in deterministic mode
  // (kOrdered) under a mask with a right edge (causal or local), where the key blocks that reach each
  // query block first add first (descending, bwd_dq_order.h, as the Ampere-path kernel takes them): CTA x
  // then takes key block n_ctas - 1 - x, so a packed call's shorter sequences leave their first CTAs
  // idle rather than their last ones (no sequence length needed).
  template <bool kOrdered>
  CUTE_DEVICE static int n_block_of(int cta, int n_ctas) {
    if constexpr (kOrdered && Mask::kHasRightEdge) {
      return n_ctas - 1 - cta;
    } else {
      return cta;
    }
  }

  // The producer warp's loop (bwd_producer.h): K and V, then each query block's Q, dO, LSE and dsum.
  template <bool kOrdered, class Storage>
  CUTE_DEVICE static void load(Params const& mp, BwdParams const& p, Storage& storage, int n_block, int head,
                               int batch) {
    const Queries qs = queries<kOrdered>(p, batch, n_block);
    BwdProducer<Traits>::template load<kStagger>(mp, p, storage, qs.seq, qs, n_block, head, batch);
  }

  // ---------------------------------------------------------------------------------------------
  // Consumers: thread_idx counts the consumer threads from 0. tdKrdK / tdVrdV accumulate this
  // warpgroup's rows of dK (unscaled) and dV; add_dq(m_block, tdQrdQ) receives each block's dQ.
  // The consumers' shared-memory buffers, each seen as the products read it (both layouts): K, V, Q and
  // dO as stored, K^T, Q^T and dO^T (head_dim first), dS^T as the consumers write it and dS as dQ reads it.
  template <class Layout>
  using SmemView = decltype(make_tensor(make_smem_ptr(static_cast<Element*>(nullptr)), Layout{}));
  struct SmemViews {
    SmemView<typename Traits::SmemLayoutK> sK;
    SmemView<typename Traits::SmemLayoutV> sV;
    SmemView<typename Traits::SmemLayoutKt> sKt;
    SmemView<typename Traits::SmemLayoutQ> sQ;
    SmemView<typename Traits::SmemLayoutdO> sdO;
    SmemView<typename Traits::SmemLayoutQt> sQt;
    SmemView<typename Traits::SmemLayoutdOt> sdOt;
    SmemView<typename Traits::SmemLayoutdS> sdS;
    SmemView<typename Traits::SmemLayoutdSt> sdSt;
  };
  template <class Storage>
  CUTE_DEVICE static SmemViews smem_views(Storage& storage) {
    return {make_tensor(make_smem_ptr(storage.k.data()), typename Traits::SmemLayoutK{}),
            make_tensor(make_smem_ptr(storage.v.data()), typename Traits::SmemLayoutV{}),
            make_tensor(make_smem_ptr(storage.k.data()), typename Traits::SmemLayoutKt{}),
            make_tensor(make_smem_ptr(storage.q.data()), typename Traits::SmemLayoutQ{}),
            make_tensor(make_smem_ptr(storage.d_o.data()), typename Traits::SmemLayoutdO{}),
            make_tensor(make_smem_ptr(storage.q.data()), typename Traits::SmemLayoutQt{}),
            make_tensor(make_smem_ptr(storage.d_o.data()), typename Traits::SmemLayoutdOt{}),
            make_tensor(make_smem_ptr(storage.ds.data()), typename Traits::SmemLayoutdS{}),
            make_tensor(make_smem_ptr(storage.ds.data()), typename Traits::SmemLayoutdSt{})};
  }

  template <class Storage, class FragKV, class AddDq>
  CUTE_DEVICE static void mma(BwdParams const& p, Storage& storage, Queries const& qs, int n_block, int thread_idx,
                              FragKV& tdKrdK, FragKV& tdVrdV, AddDq&& add_dq) {
    if constexpr (Traits::kSplitHeadDim) {
      mma_head_dim(p, storage, qs, n_block, thread_idx, tdKrdK, tdVrdV, add_dq);
    } else {
      mma_keys(p, storage, qs, n_block, thread_idx, tdKrdK, tdVrdV, add_dq);
    }
  }

  // The query blocks of key block n_block in the walk's order, each as step(m_block, masked): with kPeelMasked the
  // ones needs_mask holds for (std::true_type: mask every element), then the rest (std::false_type: no
  // mask code); otherwise MaskByBlock for all. Two call sites of `step` per instantiation.
  template <class Step>
  CUTE_DEVICE static void walk(Queries const& qs, int n_block, Step&& step) {
    if constexpr (kPeelMasked) {
      int m_block = qs.m_block_min;
      CUTE_NO_UNROLL
      for (; m_block < qs.m_block_max && qs.mask.needs_mask(m_block, n_block, kBlockM, kBlockN); ++m_block) {
        step(m_block, std::true_type{});
      }
      CUTE_NO_UNROLL
      for (; m_block < qs.m_block_max; ++m_block) { step(m_block, std::false_type{}); }
    } else if constexpr (kStagger) {
      CUTE_NO_UNROLL
      for (int iter = 0; iter < qs.m_block_max - qs.m_block_min; ++iter) {
        step(qs.at(iter), MaskByBlock{});
      }
    } else {
      CUTE_NO_UNROLL
      for (int m_block = qs.m_block_min; m_block < qs.m_block_max; ++m_block) { step(m_block, MaskByBlock{}); }
    }
  }

  // Masked scores of the step's tile to -inf: keys past seqlen_k, and the keys outside each row's
  // window (past last_key under a right edge, before first_key under a local one), in the blocks that
  // cross an edge (`masked`: see walk). cS holds each value's (key, query row) in the tile.
  template <class FragS, class Coords, class Masked>
  CUTE_DEVICE static void mask_scores(Queries const& qs, int m_block, int n_block, Coords const& cS, FragS& tSrS,
                                      Masked) {
    mask_step(Masked{}, [&] { return qs.mask.needs_mask(m_block, n_block, kBlockM, kBlockN); },
              [&] { mask_tile(qs, m_block, n_block, cS, tSrS); });
  }
  template <class FragS, class Coords>
  CUTE_DEVICE static void mask_tile(Queries const& qs, int m_block, int n_block, Coords const& cS, FragS& tSrS) {
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i) {
      const int key = n_block * kBlockN + get<0>(cS(i));
      const int row = m_block * kBlockM + get<1>(cS(i));
      bool masked = key >= qs.seq.seqlen_k;
      if constexpr (Mask::kHasRightEdge) { masked |= key > qs.mask.last_key(row); }
      if constexpr (kHasLocal<kFeatures>) { masked |= key < qs.mask.first_key(row); }
      if (masked) { tSrS(i) = -INFINITY; }
    }
  }

  // P^T = exp2(S^T * scale log2 e - LSE log2 e) in place of S^T, masked keys (and keys past seqlen_k)
  // to 0. lse_log2: the stage's row in shared memory, or the thread's rows in registers (bwd_row_stats.h).
  template <class FragS, class Coords, class Masked, class Lse>
  CUTE_DEVICE static void probabilities(BwdParams const& p, Queries const& qs, int m_block, int n_block,
                                        Lse const& lse_log2, Coords const& cS, FragS& tSrS, Masked masked) {
    mask_scores(qs, m_block, n_block, cS, tSrS, masked);
    const float scale_log2 = p.softmax_scale_log2;
    if constexpr (RowStats::template kIsShuffled<Lse>) {
      RowStats::for_each_row(lse_log2, [&](float lse, int i) { tSrS(i) = exp2_ftz(fmaf(tSrS(i), scale_log2, -lse)); });
    } else {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) {
        tSrS(i) = exp2_ftz(fmaf(tSrS(i), scale_log2, -RowStats::at(lse_log2, cS, i)));
      }
    }
  }

  // dS^T = P^T * (dP^T - dsum), the softmax gradient (unscaled: dK and dQ pick up the scale), in
  // place of dP^T, once dP^T's product (the last one issued) is done.
  template <class FragS, class Coords, class Dsum>
  CUTE_DEVICE static void softmax_grad(Dsum const& dsum, Coords const& cS, FragS const& tSrP, FragS& tdPrdP) {
    warpgroup_wait<0>();
    warpgroup_fence_operand(tdPrdP);
    if constexpr (RowStats::template kIsShuffled<Dsum>) {
      RowStats::for_each_row(dsum, [&](float d, int i) { tdPrdP(i) = tSrP(i) * (tdPrdP(i) - d); });
    } else {
      CUTE_UNROLL
      for (int i = 0; i < size(tdPrdP); ++i) { tdPrdP(i) = tSrP(i) * (tdPrdP(i) - RowStats::at(dsum, cS, i)); }
    }
  }

  // Whether this call's scores go through softcap (compiled in and on). kHasSoftcap makes it a compile-time
  // false in a kernel without the feature, so the plain kernel keeps its code (SASS-identical).
  CUTE_DEVICE static bool capped(Score const& score) { return kHasSoftcap<kFeatures> && score.softcap_on; }

  // With softcap, P^T in place of S^T and dS^T in place of dP^T, from S^T (ready) and dP^T (its product
  // may still run): dS^T needs T = tanh(S^T * softmax_scale / softcap) as well as P^T, and neither may
  // take registers of its own (the consumers are at ptxas's limit), so only the mask runs under dP^T's
  // product; then, once dP^T is done, one loop computes T, P^T = exp2(T * softcap log2 e - LSE log2 e)
  // (0 where S^T is masked: tanh takes -inf to -1) and dS^T = P^T * (dP^T - dsum) * (1 - T^2). A row that
  // sees no key (LSE +inf) gets P^T = 0 and dS^T = 0. Tried and spilled at hdim 64: T computed under the
  // product in place of S^T (48 bytes: ptxas hoists the exp2s to hide their latency and so holds T and
  // P^T at once), the same with a second pass for P^T, and the mask inside this loop (16 bytes with local).
  template <class FragS, class Coords, class Masked>
  CUTE_DEVICE static void softcap_grads(Score const& score, Queries const& qs, int m_block, int n_block,
                                        float const* lse_log2, float const* dsum, Coords const& cS, FragS& tSrS,
                                        FragS& tdPrdP, Masked masked) {
    mask_scores(qs, m_block, n_block, cS, tSrS, masked);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tdPrdP);
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i) {
      const int row = get<1>(cS(i));
      const float t = fast_tanh(tSrS(i) * score.tanh_scale);
      const float e = exp2_ftz(fmaf(t, score.scale_log2, -lse_log2[row]));
      const float p = tSrS(i) == -INFINITY ? 0.f : e;
      tdPrdP(i) = p * (tdPrdP(i) - dsum[row]) * (1.f - t * t);
      tSrS(i) = p;
    }
  }

  // kHeadDim: this warpgroup (`part`, 0 or 1) computes S^T and dP^T for query rows
  // [part * kSdPAtomN, (part + 1) * kSdPAtomN) of the step against all kBlockN keys, writes P^T and
  // dS^T of those rows into shared memory, and after both warpgroups have written theirs, adds
  // columns [part * kDkvAtomN, ...) of head_dim to dV, dK and the step's dQ.
  template <class Storage, class FragKV, class AddDq>
  CUTE_DEVICE static void mma_head_dim(BwdParams const& p, Storage& storage, Queries const& qs, int n_block,
                                       int thread_idx, FragKV& tdKrdK, FragKV& tdVrdV, AddDq&& add_dq) {
    typename Traits::TiledMmaSdP mma_sdp;
    typename Traits::TiledMmadKV mma_dkv;
    typename Traits::TiledMmadQ mma_dq;
    const auto vmnk_sdp = warpgroups_uniform(mma_sdp.get_thr_layout_vmnk().get_flat_coord(thread_idx));
    const auto vmnk_dkv = warpgroups_uniform(mma_dkv.get_thr_layout_vmnk().get_flat_coord(thread_idx));
    const auto vmnk_dq = warpgroups_uniform(mma_dq.get_thr_layout_vmnk().get_flat_coord(thread_idx));
    const int part = get<2>(vmnk_sdp);  // the warpgroup: its query rows of S^T, its columns of dK, dV

    const SmemViews v = smem_views(storage);
    auto const& [sK, sV, sKt, sQ, sdO, sQt, sdOt, sdS, sdSt] = v;
    Tensor sP = make_tensor(make_smem_ptr(storage.p.data()), typename Traits::SmemLayoutP{});

    using MmaSdP = typename Traits::TiledMmaSdP;
    using MmadKV = typename Traits::TiledMmadKV;
    using MmadQ = typename Traits::TiledMmadQ;
    constexpr int kRowsN = Traits::kSdPAtomN;
    Tensor tSrK = MmaSdP::make_fragment_A(k_major_slices<kRowsPerWarpgroup>(sK, get<1>(vmnk_sdp)));
    Tensor tSrQ = MmaSdP::make_fragment_B(k_major_slices<kRowsN>(sQ, part));  // (.., stage)
    Tensor tdPrV = MmaSdP::make_fragment_A(k_major_slices<kRowsPerWarpgroup>(sV, get<1>(vmnk_sdp)));
    Tensor tdPrdO = MmaSdP::make_fragment_B(k_major_slices<kRowsN>(sdO, part));
    Tensor tdVrP = MmadKV::make_fragment_A(k_major_slices<kRowsPerWarpgroup>(sP, get<1>(vmnk_dkv)));  // (.., buffer)
    Tensor tdKrdS = MmadKV::make_fragment_A(k_major_slices<kRowsPerWarpgroup>(sdS, get<1>(vmnk_dkv)));
    Tensor tdVrdOt = MmadKV::make_fragment_B(mn_major_slices<Traits::kDkvAtomN>(sdOt, get<2>(vmnk_dkv)));  // (.., stage)
    Tensor tdKrQt = MmadKV::make_fragment_B(mn_major_slices<Traits::kDkvAtomN>(sQt, get<2>(vmnk_dkv)));
    Tensor tdQrdS = MmadQ::make_fragment_A(mn_major_slices<kRowsPerWarpgroup>(sdSt, get<1>(vmnk_dq)));  // (.., buffer)
    Tensor tdQrKt = MmadQ::make_fragment_B(mn_major_slices<Traits::kDqAtomN>(sKt, get<2>(vmnk_dq)));

    // This warpgroup's columns (query rows) of the P^T and dS^T buffers, for stmatrix: (keys, kRowsN
    // query rows, buffer), the address of column part * kRowsN (the swizzle is the pointer's).
    auto own_columns = [&](auto const& s) {
      auto l = s.layout();
      return make_tensor(s.data() + l(0, part * kRowsN, 0),
                         make_layout(get<0>(l), composition(get<1>(l), Layout<Int<kRowsN>>{}), get<2>(l)));
    };
    const int wg_thread = thread_idx % kWarpgroupThreads;
    Tensor tPsP = stmatrix_rows<kWarpgroupThreads>(own_columns(sP), wg_thread);    // (keys, rows, buffer)
    Tensor tdSsdS = stmatrix_rows<kWarpgroupThreads>(own_columns(sdS), wg_thread);

    // (key, query row) in the tile of each value of S^T and dP^T.
    Tensor cS = accumulator_coords<kRowsN, Traits::kKeyWarpgroups, Traits::kColWarpgroups>(vmnk_sdp);
    const Score score(p);
    if (qs.m_block_max > qs.m_block_min) { cutlass::arch::ClusterTransactionBarrier::wait(&storage.kv_full, 0); }
    Tensor tdQrdQ = make_tensor<float>(AccumulatorShapedQ{});
    walk(qs, n_block, [&](int m_block, auto masked) {
      const int iter = qs.template iter_of<kStagger>(m_block);
      const int stage = iter % kStages;
      const int buffer = iter & 1;
      const int do_stage = Traits::kDqInTurn ? 0 : stage;  // dO's stage: Q's, or kDqInTurn's one
      cutlass::arch::ClusterTransactionBarrier::wait(&storage.qdo_full[stage], (iter / kStages) & 1);

      // S^T = K Q^T and dP^T = V dO^T for this warpgroup's query rows, issued back to back (kDqInTurn: dP^T once
      // the one dO stage holds this block's).
      Tensor tSrS = make_tensor<float>(AccumulatorShapeSdP{});
      Tensor tdPrdP = make_tensor<float>(AccumulatorShapeSdP{});
      auto issue_sdp = [&] {
        wgmma<-1, false>(mma_sdp, tSrK, tSrQ(_, _, _, stage), tSrS, true);
        if constexpr (Traits::kDqInTurn) { cutlass::arch::ClusterTransactionBarrier::wait(&storage.do_full, iter & 1); }
        wgmma<-1, false>(mma_sdp, tdPrV, tdPrdO(_, _, _, do_stage), tdPrdP, true);
      };
      auto row_stats = [&](float const* stats) {  // kStatsHeadDimRegisters: loaded where it is called
        if constexpr (kStatsHeadDimRegisters) {
          return RowStats::registers(stats, cS);
        } else {
          return stats;
        }
      };
      if constexpr (kStatsEarly == 0) { issue_sdp(); }
      auto lse = row_stats(storage.lse_log2[stage]);  // kStatsEarly == 0: while the products run
      [[maybe_unused]] auto dsum_early = [&] {
        if constexpr (kStatsEarly == 2) {
          return row_stats(storage.dsum[stage]);
        } else {
          return 0;
        }
      }();
      if constexpr (kStatsEarly != 0) { issue_sdp(); }
      warpgroup_wait<1>();  // S^T is ready; dP^T may still run
      warpgroup_fence_operand(tSrS);
      // P^T and dS^T into this step's buffers (the other warpgroup may still read the other ones in
      // its previous step's products; these were last read two steps ago, before the barrier below
      // of the previous step), P^T while dP^T's product may still run (with softcap, once it is done).
      if (capped(score)) {
        softcap_grads(score, qs, m_block, n_block, storage.lse_log2[stage], storage.dsum[stage], cS, tSrS, tdPrdP,
                      masked);
        stmatrix_accumulator(tPsP(_, _, buffer), convert_type<Element>(tSrS));
      } else {
        probabilities(p, qs, m_block, n_block, lse, cS, tSrS, masked);
        auto dsum = [&] {  // kStatsHeadDimRegisters: loaded before softmax_grad's wait (kStatsEarly 2: earlier)
          if constexpr (kStatsEarly == 2) {
            return dsum_early;
          } else {
            return row_stats(storage.dsum[stage]);
          }
        }();
        stmatrix_accumulator(tPsP(_, _, buffer), convert_type<Element>(tSrS));
        softmax_grad(dsum, cS, tSrS, tdPrdP);
      }
      stmatrix_accumulator(tdSsdS(_, _, buffer), convert_type<Element>(tdPrdP));
      // Made visible to the tensor cores; then both warpgroups' rows are in.
      cutlass::arch::fence_view_async_shared();
      cutlass::arch::NamedBarrier::sync(kNumMmaThreads, static_cast<int>(BwdBarrier::kdSFull));

      if constexpr (Traits::kDqInTurn) {
        // dV first, so that the one dO stage is released (and the next block's dO loads) as early as it can be; then
        // dQ, handed to the writer warp (shared-memory stores) while dK's product runs.
        wgmma<-1, false>(mma_dkv, tdVrP(_, _, _, buffer), tdVrdOt(_, _, _, 0), tdVrdV, false);
        wgmma<-1, false>(mma_dq, tdQrdS(_, _, _, buffer), tdQrKt, tdQrdQ, true);
        wgmma<-1, false>(mma_dkv, tdKrdS(_, _, _, buffer), tdKrQt(_, _, _, stage), tdKrdK, false);
        warpgroup_wait<2>();
        cutlass::arch::ClusterBarrier::arrive(&storage.do_empty);  // dO is read (dP^T's product waited on above)
        warpgroup_wait<1>();
        warpgroup_fence_operand(tdQrdQ);
        add_dq(m_block, tdQrdQ);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tdVrdV);
        warpgroup_fence_operand(tdKrdK);
        cutlass::arch::ClusterBarrier::arrive(&storage.qdo_empty[stage]);  // Q is read
        return;
      }
      // dQ = dS K first, so that its reductions leave while the tensor cores work on dV += P^T dO and
      // dK += dS^T Q (this warpgroup's head_dim columns of each).
      wgmma<-1, false>(mma_dq, tdQrdS(_, _, _, buffer), tdQrKt, tdQrdQ, true);
      wgmma<-1, false>(mma_dkv, tdVrP(_, _, _, buffer), tdVrdOt(_, _, _, do_stage), tdVrdV, false);
      wgmma<-1, false>(mma_dkv, tdKrdS(_, _, _, buffer), tdKrQt(_, _, _, stage), tdKrdK, false);
      warpgroup_wait<2>();  // dQ is ready
      warpgroup_fence_operand(tdQrdQ);
      add_dq(m_block, tdQrdQ);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tdVrdV);
      warpgroup_fence_operand(tdKrdK);
      cutlass::arch::ClusterBarrier::arrive(&storage.qdo_empty[stage]);  // Q and dO are read
    });
  }

  // kKeys: this warpgroup's 64 keys against all kBlockM query rows of each step.
  template <class Storage, class FragKV, class AddDq>
  CUTE_DEVICE static void mma_keys(BwdParams const& p, Storage& storage, Queries const& qs, int n_block, int thread_idx,
                                   FragKV& tdKrdK, FragKV& tdVrdV, AddDq&& add_dq) {
    typename Traits::TiledMmaSdP mma_sdp;
    typename Traits::TiledMmadKV mma_dkv;
    typename Traits::TiledMmadQ mma_dq;
    // (thread in the warpgroup, warpgroup in M, in N, in K) of this thread in each product.
    const auto vmnk_sdp = warpgroups_uniform(mma_sdp.get_thr_layout_vmnk().get_flat_coord(thread_idx));
    const auto vmnk_dkv = warpgroups_uniform(mma_dkv.get_thr_layout_vmnk().get_flat_coord(thread_idx));
    const auto vmnk_dq = warpgroups_uniform(mma_dq.get_thr_layout_vmnk().get_flat_coord(thread_idx));

    const SmemViews v = smem_views(storage);
    auto const& [sK, sV, sKt, sQ, sdO, sQt, sdOt, sdS, sdSt] = v;

    // wgmma's shared-memory operands as descriptors (utils.h): this warpgroup's 64 keys of sK and
    // sV, its rows of dS and its columns of K^T for dQ, all of the rest.
    using MmaSdP = typename Traits::TiledMmaSdP;
    using MmadKV = typename Traits::TiledMmadKV;
    using MmadQ = typename Traits::TiledMmadQ;
    Tensor tSrK = MmaSdP::make_fragment_A(k_major_slices<kRowsPerWarpgroup>(sK, get<1>(vmnk_sdp)));  // (MMA, MMA_M, MMA_K)
    Tensor tSrQ = MmaSdP::make_fragment_B(k_major_slices<kBlockM>(sQ, get<2>(vmnk_sdp)));  // (MMA, MMA_N, MMA_K, stage)
    Tensor tdPrV = MmaSdP::make_fragment_A(k_major_slices<kRowsPerWarpgroup>(sV, get<1>(vmnk_sdp)));
    Tensor tdPrdO = MmaSdP::make_fragment_B(k_major_slices<kBlockM>(sdO, get<2>(vmnk_sdp)));
    Tensor tdVrdOt = MmadKV::make_fragment_B(mn_major_slices<kHeadDim>(sdOt, get<2>(vmnk_dkv)));  // (.., stage)
    Tensor tdKrQt = MmadKV::make_fragment_B(mn_major_slices<kHeadDim>(sQt, get<2>(vmnk_dkv)));
    Tensor tdQrdS = MmadQ::make_fragment_A(mn_major_slices<kRowsPerWarpgroup>(sdSt, get<1>(vmnk_dq)));  // (.., buffer)
    Tensor tdQrKt = MmadQ::make_fragment_B(mn_major_slices<Traits::kDqAtomN>(sKt, get<2>(vmnk_dq)));

    Tensor tdSsdS = stmatrix_rows<kNumMmaThreads>(sdS, thread_idx);  // (keys, query rows, buffer)

    // (key, query row) in the tile of each value of S^T and dP^T.
    Tensor cS = accumulator_coords<kBlockM, Traits::kNumMmaWarpgroups>(vmnk_sdp);
    const Score score(p);
    if (qs.m_block_max > qs.m_block_min) { cutlass::arch::ClusterTransactionBarrier::wait(&storage.kv_full, 0); }
    Tensor tdQrdQ = make_tensor<float>(AccumulatorShapedQ{});
    // One step (query block). Inlined first thing (always_inline), it compiles as the loop's own body
    // would: the same SASS as before the lambda at head dims 96 and 128. hdim 64's step (kDsFirst) is called
    // through a lambda that is not, which the optimizer inlines later: that kernel, the one timed in
    // benchmarks/hopper_bwd_fa3/ (the same SASS), had no spills then, and spilled 4 bytes compiled as the loop's
    // body (nvcc 13.0). Since the per-warpgroup dQ hand-off (kDqHalves) the hdim-64 kernels spill the 4 bytes of
    // its barrier id (tests/test_compile.py allows them), but the plain non-causal one with the shuffled stats
    // (kStatsShuffled), which spills none (tests/test_compile_bwd_uniform.py).
    static_assert(!(kStagger && Traits::kDeferDq), "kDeferDq adds the previous block's dQ at m_block - 1: plain walks");
    auto step = [&](int m_block, auto masked) __attribute__((always_inline)) {
      const int iter = qs.template iter_of<kStagger>(m_block);
      const int stage = iter % kStages;
      const int buffer = iter & 1;
      cutlass::arch::ClusterTransactionBarrier::wait(&storage.qdo_full[stage], (iter / kStages) & 1);

      // S^T = K Q^T and dP^T = V dO^T, issued back to back.
      Tensor tSrS = make_tensor<float>(AccumulatorShapeSdP{});
      Tensor tdPrdP = make_tensor<float>(AccumulatorShapeSdP{});
      wgmma<-1, false>(mma_sdp, tSrK, tSrQ(_, _, _, stage), tSrS, true);
      wgmma<-1, false>(mma_sdp, tdPrV, tdPrdO(_, _, _, stage), tdPrdP, true);
      if constexpr (Traits::kDeferDq) {
        if (m_block > qs.m_block_min) { add_dq(m_block - 1, tdQrdQ); }  // the previous step's, under S^T and dP^T
      }
      // kStatsInRegisters / kStatsShuffled: the rows' LSE loaded while the products run (loads after the wait
      // would be the first thing P^T waits for).
      auto lse = [&] {
        if constexpr (kStatsShuffled) {
          return RowStats::shuffled(storage.lse_log2[stage], cS);
        } else if constexpr (kStatsInRegisters) {
          return RowStats::registers(storage.lse_log2[stage], cS);
        } else {
          return storage.lse_log2[stage];
        }
      }();
      warpgroup_wait<1>();  // S^T is ready; dP^T may still run

      // dV += P^T dO, P^T from registers; dS^T into this step's buffer (the other one may still be read
      // by the other warpgroup's previous dQ product; this one was last read two steps ago, before the
      // barrier below of the previous step), made visible to the tensor cores, under dV's product or
      // before it is issued (kDsFirst). Before dK's product: registers an in-flight wgmma reads as its A
      // operand must not be written until it is waited on.
      Tensor rP = make_tensor<Element>(tSrS.layout());
      Tensor rdS = make_tensor<Element>(tdPrdP.layout());
      Tensor tdVrP = make_tensor(rP.data(), acc_to_a_operand(tSrS.layout()));
      if (capped(score)) {
        softcap_grads(score, qs, m_block, n_block, storage.lse_log2[stage], storage.dsum[stage], cS, tSrS, tdPrdP,
                      masked);
      } else {
        probabilities(p, qs, m_block, n_block, lse, cS, tSrS, masked);
        if constexpr (kStatsShuffled) {
          softmax_grad(RowStats::shuffled(storage.dsum[stage], cS), cS, tSrS, tdPrdP);  // loaded before the wait
        } else if constexpr (kStatsInRegisters) {
          softmax_grad(RowStats::registers(storage.dsum[stage], cS), cS, tSrS, tdPrdP);  // before the wait for dP^T
        } else {
          softmax_grad(storage.dsum[stage], cS, tSrS, tdPrdP);  // waits for dP^T
        }
      }
      convert_into(tSrS, rP);
      convert_into(tdPrdP, rdS);
      if constexpr (Traits::kDsFirst) {
        stmatrix_accumulator(tdSsdS(_, _, buffer), rdS);
        cutlass::arch::fence_view_async_shared();
        wgmma<-1, true>(mma_dkv, tdVrP, tdVrdOt(_, _, _, stage), tdVrdV, false);
      } else {
        wgmma<-1, true>(mma_dkv, tdVrP, tdVrdOt(_, _, _, stage), tdVrdV, false);
        stmatrix_accumulator(tdSsdS(_, _, buffer), rdS);
        cutlass::arch::fence_view_async_shared();
      }

      // dK += dS^T Q, dS^T from registers; dQ = dS K over all kBlockN keys (this warpgroup's share of
      // the (kBlockM, d) tile) once both warpgroups' dS^T rows are in.
      Tensor tdKrdS = make_tensor(rdS.data(), acc_to_a_operand(tdPrdP.layout()));
      if constexpr (Traits::kDqFirst) {
        // dQ issued first, so that its hand-off (the shared-memory writes of kFragmentBulk, or the
        // reductions) runs under dK's product.
        cutlass::arch::NamedBarrier::sync(kNumMmaThreads, static_cast<int>(BwdBarrier::kdSFull));
        wgmma<-1, false>(mma_dq, tdQrdS(_, _, _, buffer), tdQrKt, tdQrdQ, true);
        wgmma<1, true>(mma_dkv, tdKrdS, tdKrQt(_, _, _, stage), tdKrdK, false);  // waits for dV and dQ
        warpgroup_fence_operand(tdQrdQ);
        add_dq(m_block, tdQrdQ);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tdKrdK);
        cutlass::arch::ClusterBarrier::arrive(&storage.qdo_empty[stage]);  // Q and dO are read
      } else {
        // dK issued before the barrier, so that the tensor cores have dV and dK to work on while the
        // warpgroups wait for each other's dS^T.
        wgmma<-1, true>(mma_dkv, tdKrdS, tdKrQt(_, _, _, stage), tdKrdK, false);
        cutlass::arch::NamedBarrier::sync(kNumMmaThreads, static_cast<int>(BwdBarrier::kdSFull));
        wgmma<0, false>(mma_dq, tdQrdS(_, _, _, buffer), tdQrKt, tdQrdQ, true);  // waits for all three
        cutlass::arch::ClusterBarrier::arrive(&storage.qdo_empty[stage]);       // Q and dO are read
        if constexpr (!Traits::kDeferDq) { add_dq(m_block, tdQrdQ); }
      }
    };
    if constexpr (Traits::kDsFirst) {
      walk(qs, n_block, [&](int m_block, auto masked) { step(m_block, masked); });
    } else {
      walk(qs, n_block, step);
    }
    if constexpr (Traits::kDeferDq) {
      if (qs.m_block_max > qs.m_block_min) { add_dq(qs.m_block_max - 1, tdQrdQ); }
    }
  }
};

}  // namespace flashbuild::hopper
