// The forward main loop of one tile (a query block of one (batch, head)), in its two roles.
//   Producer (one warp of the producer warpgroup, one elected lane issuing): TMA loads of Q into
//   sQ once per tile, and of the K and V tiles the block sees into two rings of kStages buffers,
//   from the last key block down (the blocks that need masking come first).
//   Consumers (kBlockM / 64 warpgroups, 64 query rows each, all reading the same K/V tile):
//   S = Q K^T (wgmma, both operands in shared memory), the score transform and mask, the online
//   softmax in registers, O += P V (wgmma, P from registers). Causal 128-row tiles walk the steps
//   that need the mask in a loop of their own, then the rest in one with no mask code (kPeelMasked).
//   Within a warpgroup the product of the next S is issued before the previous P V, so that the
//   softmax of S can run while the tensor cores work on P V (intra-warpgroup overlap; in the SASS
//   only with kOverlapSoftmax, which keeps ptxas from hoisting the wait on P V above the softmax);
//   between warpgroups, with kPingpong, each issues its products only in its turn, so one
//   warpgroup's softmax runs under the other's products.
// Partial tiles: TMA zero-fills rows past the end of a view, the mask sets keys >= seqlen_k to -inf,
// and V rows times zero probabilities add nothing: past a view's end they are zeros, and rows the
// box loads past the sequence's keys (seqused_k, or the next packed sequence) are zeroed in shared
// memory before P V reads them (zero_v_rows). Rows of Q past seqlen_q, and a causal call's rows
// before the sequence (SeqRange::bottom_aligned: TMA's zeros at a negative row, or the previous
// packed sequence's rows), give rows of O that the epilogue does not store.
#pragma once

#include "common/features.h"  // the softcap transform and the masks, shared with the Ampere path
#include "common/index_errors.h"  // checked_index: the split-KV's page table read unchecked (CacheIndexCheck::at_read)
#include "hopper/fwd_params.h"
#include "hopper/fwd_softmax.h"
#include "hopper/tile_scheduler.h"
#include "hopper/utils.h"

namespace flashbuild::hopper {

template <class Traits, bool kIsCausal, int kFeatures>
struct FwdMainloop {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kNumMmaThreads = Traits::kNumMmaThreads;
  static constexpr int kNumMmaWarpgroups = Traits::kNumMmaWarpgroups;
  using SmemLayoutQ = typename Traits::SmemLayoutQ;
  using SmemLayoutK = typename Traits::SmemLayoutK;
  using SmemLayoutV = typename Traits::SmemLayoutV;
  using SmemLayoutVt = typename Traits::SmemLayoutVt;
  using TileShapeQK = typename Traits::TileShapeQK;
  using PipelineKV = typename Traits::PipelineKV;
  using PipelineState = typename PipelineKV::PipelineState;
  using Mask = AttentionMask<kIsCausal, kHasLocal<kFeatures>>;
  using AccumulatorShapeS = AccumulatorShape<kBlockN>;    // S = Q K^T
  using AccumulatorShapeO = AccumulatorShape<kHeadDim>;   // O = P V
  // Causal (no window, not split-KV), 128-row tiles (hdim 96-256): the steps that need the mask (the
  // diagonal's, ceil(kBlockM / kBlockN) or one more of a query block's walk from its last key block
  // down) are a loop of their own, and the rest a loop with no mask code, instead of one loop testing
  // needs_mask every step (the Ampere forward's split, benchmarks/fwd_masked_steps). Each step body is a
  // generic lambda with exactly two call sites, so nvcc inlines it (with three it put the accumulators
  // on the stack there). In turns on the H200 against the one loop (benchmarks/fwd_causal_fa3), causal
  // fp16 1k / 4k / 16k: hdim 128 1.038 / 1.047 / 1.046x, 192 1.028 / 1.064 / 1.071x (bf16 1.028-1.076x),
  // 96 1.003 / 1.015 / 1.015x, 256 1.006 / 1.008 / 1.011x; hdim 64's 192-row tiles 0.988 / 1.007 / 1.014x
  // (bf16 the same), so not there then. Again on the tree with kUniformQ at hdim 64 (benchmarks/fwd_sass_fa3, call
  // h200-12, 7 rounds, fp16 | bf16): 1.000 | 1.002 at 1k, 1.004 | 1.004 at 2k, 1.007 | 1.005 at 4k, 1.011 | 1.010 at
  // 8k, 1.006 | 1.004 at 16k, bit-identical: so at hdim 64 too. hdim 32 (hdim 64's tile) with kUniformQ below, arm
  // uqp of call h200-15: see kUniformQ.
  // nvcc -DFLASHBUILD_HOPPER_FWD_PEEL=0 (or 1) sets it for every causal tile of a whole build, for A/B runs.
#if defined(FLASHBUILD_HOPPER_FWD_PEEL)
  static constexpr bool kPeelTile = FLASHBUILD_HOPPER_FWD_PEEL != 0;
#else
  static constexpr bool kPeelTile = kNumMmaWarpgroups == 2 || kHeadDim <= 64;
#endif
  static constexpr bool kPeelMasked = kPeelTile && kIsCausal && !kHasLocal<kFeatures> && !kIsSplitKV<kFeatures>;
  // The softmax under this warpgroup's own P V (fwd_traits.h): the tiles' choice, in the kernels where it
  // was measured faster, the non-causal ones. Causal it was slower, with the per-step needs_mask test
  // (benchmarks/fwd_softmax_overlap) and with the masked steps peeled (0.95-0.98x the peeled loop without
  // it at hdim 128 and 192, benchmarks/fwd_causal_fa3); local-window kernels were not measured. A sweep's
  // define (nvcc -DFLASHBUILD_HOPPER_FWD_OVERLAP=1) forces it.
  // kKeys128Plain: hdim 128's plain non-causal 128-key kernel (kKeys128Kernel: the keys below wide_keys_from and
  // paged caches), which runs its softmax after its own P V and its row max in 4 chains (kMaxChains below): in turns
  // on the H200 (benchmarks/fwd_sass_fa3, calls h200-9 and h200-10, arm nov4 against the defaults), 1.003-1.016x at
  // 1k-4k in every round, fp16 and bf16, bit-identical; the 176-key kernel from 8k lost 1.5 % that way (h200-9), and
  // hdim 192 non-causal 3-5 % (h200-10), so they keep the overlap.
  static constexpr bool kKeys128Plain = kHeadDim == 128 && !kIsCausal && (kFeatures & kKeys128Kernel) != 0 &&
                                        (kFeatures & kAllFeatures) == 0 && !kIsSplitKV<kFeatures>;
#ifdef FLASHBUILD_HOPPER_FWD_OVERLAP
  static constexpr bool kOverlapSoftmax = Traits::kOverlapSoftmax;
#else
  static constexpr bool kOverlapSoftmax =
      Traits::kOverlapSoftmax && !kIsCausal && !kHasLocal<kFeatures> && !kKeys128Plain;
#endif

  // Three choices from the SASS beside FA3's hdim-128 forward (benchmarks/fwd_sass_fa3: two H200 calls, in turns,
  // outputs bit-identical), each settable for a whole build for A/B runs
  // (nvcc -DFLASHBUILD_HOPPER_FWD_UNIFORM_Q / _EDGE_TURNS / _LEAD_WAITS = 0 or 1).
  // kUniformQ: Q's wgmma descriptors from the warp-uniform warpgroup index (mma). Without it ptxas kept the
  // eight descriptors of this warpgroup's sQ slices in 16 vector registers and moved each into a uniform
  // register (R2UR) before every Q K^T wgmma: 16 R2UR a step, between the turn's barrier and the product,
  // where FA3's loop has none (its mainloop shuffles the index, as cutlass::canonical_warp_group_idx does).
  // 19 instructions fewer a step (causal unmasked 485 -> 466; FA3 455-469) but within the noise of the
  // clock: 0.995-1.008x per row, 1.001-1.006x at 1k-4k and 0.996-1.002x at causal 16k over the two calls.
  // hdim 64's three-warpgroup tile (call h200-11, arm uq1): 8-9 instructions fewer a step (causal unmasked
  // 453 -> 444, plain 435 -> 427; FA3's 192 x 128 step 417), 1.005-1.016x in every row (fp16 and bf16, causal
  // or not, 1k-16k, 7 rounds), bit-identical.
  // hdim 96 and 192 (call h200-14, 5 rounds, bit-identical): hdim 96 causal 1.011-1.026x, non-causal 0.977-0.989x;
  // hdim 192 non-causal 1.005-1.012x, causal 0.977-1.023x round by round (no sign); hdim 256 lost 1.3-1.5 % at 16k
  // causal (call h200-5). hdim 32 on hdim 64's tile, with its causal steps peeled (kPeelTile), against neither (call
  // h200-15, arm uqp, 5 rounds, bit-identical: every round won): non-causal 1.015-1.018x at 1k, 1.006-1.007x at 4k,
  // 1.001-1.008x at 16k; causal 1.029-1.031x at 1k, 1.020-1.025x at 4k and 16k (fp16 and bf16).
  // On in the plain kernels measured faster: hdim 32, 64 and 128, hdim 96 causal, hdim 192 non-causal (not the
  // split-KV kernel's, nor local or softcap ones).
#ifdef FLASHBUILD_HOPPER_FWD_UNIFORM_Q
  static constexpr bool kUniformQ = FLASHBUILD_HOPPER_FWD_UNIFORM_Q != 0;
#else
  static constexpr bool kUniformQ =
      (kHeadDim <= 64 || kHeadDim == 128 || (kHeadDim == 96 && kIsCausal) || (kHeadDim == 192 && !kIsCausal)) &&
      (kFeatures & kAllFeatures) == 0 && !kIsSplitKV<kFeatures>;
#endif
  // kEdgeTurns (ping-pong tiles): a tile's first Q K^T and last P V each take a turn, as the steps' products do;
  // FA3 issues them without one. kLeadWaits: inside the steps only the first consumer warpgroup waits on the
  // K and V stages' full barriers; the others take their turn after it has issued that step's products, so
  // after its waits (FA3's form: our SASS had two mbarrier waits a step in each warpgroup, one inside the
  // turn, between Q K^T's issue and P V's). On the 176-key kernel (kWideKeys) the lead waits pay, 1.019-1.025x
  // at 16k, the edge turns not (dropped alone: 0.996-0.999x); so both FA3's way there. On the 128-key kernels
  // both lose at 1k (0.976-0.992x) and the two calls disagree at 4k-16k causal (FA3's two together
  // 0.974-0.991x in the first, each alone 1.005-1.031x in the second): kept as they were, a lead for a
  // longer A/B.
  static constexpr bool kWideTile = kWideKeys<kHeadDim, kIsCausal, kFeatures>;
#ifdef FLASHBUILD_HOPPER_FWD_EDGE_TURNS
  static constexpr bool kEdgeTurns = FLASHBUILD_HOPPER_FWD_EDGE_TURNS != 0;
#else
  static constexpr bool kEdgeTurns = !kWideTile;
#endif
#ifdef FLASHBUILD_HOPPER_FWD_LEAD_WAITS
  static constexpr bool kLeadWaits = Traits::kPingpong && FLASHBUILD_HOPPER_FWD_LEAD_WAITS != 0;
#else
  static constexpr bool kLeadWaits = Traits::kPingpong && kWideTile;
#endif
  // With kLeadWaits and no edge turns, a skipping warpgroup's turn (kSkipIdleBlock) is the one in which the next
  // warpgroup's first step reads the next block's K on the lead's wait alone: taken only after that wait (the early
  // turn let hdim 64's causal 4k outputs differ by 1.5e-2 under -D..._EDGE_TURNS=0 -D..._LEAD_WAITS=1).
  static constexpr bool kSkipTurnLate = kLeadWaits && !kEdgeTurns;

  // kRowLimits: the mask as FA3's forward writes it. Per row of this thread one limit, computed once per
  // step (the first key column the row may not see, less the block's first column and this thread's
  // first column), then each element's column, a constant inside the thread's fragment, compared against
  // it: one ISETP with an immediate a score. AttentionMask::apply (the Ampere path's too) computes each
  // element's row and column and compares them against seqlen_k and last_key(row): two compares and the
  // index arithmetic a score (benchmarks/fwd_sass_fa3: the masked step 678 instructions against FA3's 602).
  // The same scores masked (bit-identical outputs); not with a local window (its left edge, apply's).
  // SASS: the masked causal step 678 -> 617 instructions (ISETP 357 -> 291, VIADD 94 -> 34 in the kernel).
  // In turns on the H200 (benchmarks/fwd_sass_fa3, call 3), hdim 128 causal 1k / 4k / 16k: fp16 1.012 /
  // 1.015 / 1.031x, bf16 1.016 / 1.016 / 1.033x; non-causal (only the first block is masked) 0.997-1.001x.
  // At hdim 192 and 256 (benchmarks/fwd_short_hdim256, call 2, in turns, fp16 / bf16, 1k / 4k / 16k): 192 on its
  // 96-key tiles 1.005 / 1.001, 1.017 / 1.003, 1.008 / 1.000x, on the 112-key ones (without ping-pong) 1.010 /
  // 1.009, 0.998 / 0.998, 0.998 / 0.999x; 256 0.989 / 0.986, 0.999 / 1.013, 1.007 / 1.010x (a second build, the
  // base tree with the define: 0.990 / 0.985, 0.993 / 1.011, 1.007 / 1.009x). On at 256 for the 16k rows (where
  // FA3 is ahead; 1k stays 1.00x cuDNN), a trade, not a win everywhere.
  // At hdim 64 on its 192 x 128 tiles (benchmarks/fwd_short_hdim64, call h200-1, in turns, fp16 / bf16): 1.015 /
  // 1.015x at 1k, 1.014 / 1.010 at 2k, 1.008 / 1.009 at 4k, 1.006 / 1.007 at 16k; with kSkipIdleQK below 1.028 /
  // 1.025, 1.016 / 1.015, 1.005 / 1.013, 1.002 / 1.003x (both on there).
  // On where measured: the plain causal kernels of hdim 64 and 128-256 (not split-KV, local or softcap ones).
  // nvcc -DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=0 or 1 sets it for a whole build, for A/B runs.
#ifdef FLASHBUILD_HOPPER_FWD_ROW_LIMITS
  static constexpr bool kRowLimits = FLASHBUILD_HOPPER_FWD_ROW_LIMITS != 0 && !kHasLocal<kFeatures>;
#else
  static constexpr bool kRowLimits = kIsCausal && (kHeadDim == 64 || kHeadDim >= 128) &&
                                     (kFeatures & kAllFeatures) == 0 && !kIsSplitKV<kFeatures>;
#endif

  // kMaxChains (OnlineSoftmax, fwd_softmax.h): each row's max over a step's scores in that many independent FMNMX
  // chains instead of one, the same values (bit-identical outputs). In turns on the H200 (benchmarks/fwd_sass_fa3,
  // calls h200-6 and h200-7, 4 chains against 1, fp16 / bf16): hdim 128 causal 1.013 / 1.015x at 4k, 1.018 / 1.017x
  // at 16k (h200-6), 1.005-1.012x at 1k-16k (h200-7; 2 chains less at 16k, 8 lose); hdim 128 non-causal (the
  // overlapped steps, kOverlapSoftmax) 0.964-0.977x; hdim 256 causal 0.983-0.987x from 4k; hdim 64 causal 1.013x at 1k
  // but 0.992-0.995x at 16k; h200-8: hdim 96 causal 1.022-1.032x at 1k-16k, 192 causal 0.993-0.996x at 1k and
  // 1.001-1.015x from 4k, hdim 128 non-causal with 2 chains 0.966-0.978x; h200-9, non-causal with 4 chains: hdim 96
  // 1.001-1.004x, 64 0.955-0.972x; h200-16, hdim 32 (hdim 64's tile, with kUniformQ and the peel; every round won,
  // bit-identical), 4 / 2 chains: non-causal 1.006-1.008 / 1.007-1.009x at 1k, 1.031-1.033 / 1.028-1.032x at 4k,
  // 1.040-1.044 / 1.034-1.041x at 16k; causal 1.006-1.011 / 1.021-1.024x at 1k, 1.024-1.026 / 1.027-1.029x at 4k,
  // 1.027-1.031 / 1.029-1.033x at 16k (and hdim 96 non-causal again 1.001-1.003x). So 4 in the plain causal kernels of
  // hdim 96 and 128, in hdim 128's 128-key kernel without the overlap (kKeys128Plain above) and in hdim 32's plain
  // non-causal kernel, 2 in hdim 32's plain causal kernel, 1 elsewhere (tests/test_compile_fwd_max_chains.py holds
  // hdim 128's, tests/test_compile_fwd_arms.py hdim 32's).
  // nvcc -DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=N sets it for every kernel of a build (A/B runs).
#ifdef FLASHBUILD_HOPPER_FWD_MAX_CHAINS
  static constexpr int kMaxChains = FLASHBUILD_HOPPER_FWD_MAX_CHAINS;
#else
  static constexpr bool kPlainKernel = (kFeatures & kAllFeatures) == 0 && !kIsSplitKV<kFeatures>;
  static constexpr int kMaxChains = (kIsCausal && (kHeadDim == 96 || kHeadDim == 128) && kPlainKernel) || kKeys128Plain
                                        ? 4
                                    : kHeadDim == 32 && kPlainKernel ? (kIsCausal ? 2 : 4)
                                                                     : 1;
#endif
  static_assert(kMaxChains >= 1, "at least one chain");

  // kPassAfterQK, the overlapped (non-causal) steps only: the turn passed once Q K^T is issued, P V issued
  // after it, outside the turn. O's rescale and P's conversion, which the source puts before the turn,
  // ptxas sinks between the two products (after the turn's BAR.SYNC, up to their first reader), so the
  // turn held 161 (128 keys) / 142 (176 keys) instructions where FA3's holds ~70; with this 61 / 88.
  // A wgmma fence (WARPGROUP.ARRIVE, operands fenced) between them and the turn did not hold them there
  // (161 / 142, the same SASS); the non-overlapped order with the wait on P V behind a branch, to keep it
  // below the softmax, made ptxas serialize every wgmma (C7514). In turns on the H200 (benchmarks/fwd_sass_fa3,
  // call 3) the shorter turn gained nothing: non-causal 0.996-1.000x (1k-16k, fp16 and bf16). Off.
  // nvcc -DFLASHBUILD_HOPPER_FWD_PASS_AFTER_QK=0 or 1 (A/B runs).
#ifdef FLASHBUILD_HOPPER_FWD_PASS_AFTER_QK
  static constexpr bool kPassAfterQK = Traits::kPingpong && FLASHBUILD_HOPPER_FWD_PASS_AFTER_QK != 0;
#else
  static constexpr bool kPassAfterQK = false;
#endif

  // kSkipIdleQK (causal tiles of several consumer warpgroups, no window): a warpgroup whose 64 rows see no key of
  // the tile's first walked block (its last) issues no Q K^T there; the mask sets every score of those rows to
  // -inf all the same (each column is past each row's last key), so the outputs are the same bits. At hdim 64's
  // 192 x 128 tiles and 1k such slices are 11 % of the call's MMA, every one in a tile's first step (half of it this
  // Q K^T, half the next step's P V over zeros, which kSkipIdleBlock below takes out; benchmarks/fwd_short_hdim64,
  // count.py). In turns on the H200 (that study, call h200-1, fp16 / bf16): alone 1.006 / 1.005x at 1k, 0.990 /
  // 0.989 at 16k; with kRowLimits the pair's numbers above. On where measured, with kRowLimits: the plain causal
  // kernels of hdim 64.
  // nvcc -DFLASHBUILD_HOPPER_FWD_SKIP_IDLE_QK=0 or 1 sets it for a whole build (A/B runs).
#if defined(FLASHBUILD_HOPPER_FWD_SKIP_IDLE_QK)
  static constexpr bool kSkipIdleQK = FLASHBUILD_HOPPER_FWD_SKIP_IDLE_QK != 0 && kIsCausal && kNumMmaWarpgroups > 1 &&
                                      !kHasLocal<kFeatures> && !kIsSplitKV<kFeatures>;
#else
  static constexpr bool kSkipIdleQK = kIsCausal && kHeadDim == 64 && kNumMmaWarpgroups > 1 &&
                                      (kFeatures & kAllFeatures) == 0 && !kIsSplitKV<kFeatures>;
#endif

  // kSkipIdleBlock (with the same kernels as kSkipIdleQK): a warpgroup whose 64 rows see no key of the tile's first
  // walked block, in a tile of two key blocks or more, does nothing with that block: it waits for its K and V stages
  // and releases them unread, takes one turn (the one its first step would have taken: the ping-pong turns stay as
  // many as the other warpgroups'), and starts at the next block, which it then walks as its first (softmax step
  // <true>). Before, it ran that block's masked softmax over -inf scores and, in its first step, P V over zero
  // probabilities (the other half of kSkipIdleQK's idle slices: 5.5 % of the MMA at hdim 64, 1k, and a masked
  // softmax a slice). The same bits: the skipped softmax left the row max -inf and the sum 0, so the next step's scale
  // was exp2(-inf) = 0 and its sum fmaf(0, 0, sum) = sum, and O 0 + 0 V = 0 scaled by 0 is the 0 that clear() leaves.
  // The branch holds no wgmma and no wgmma wait (a guarded wait made ptxas serialize every wgmma: benchmarks/
  // fwd_sass_fa3); the loop is untouched (an idle warpgroup walks one step fewer). In turns on the H200 against the
  // tree before (kRowLimits and kSkipIdleQK on; benchmarks/fwd_short_hdim64, call h200-2, same bits), hdim 64 causal
  // fp16 / bf16: 1k 1.039 / 1.030x (0.948 -> 0.985 / 0.950 -> 0.978x SDPA's cuDNN), 2k 1.045 / 1.036, 4k 1.025 / 1.017,
  // 16k 1.010 / 1.010x. On where measured, with kSkipIdleQK: the plain causal kernels of hdim 64.
  // nvcc -DFLASHBUILD_HOPPER_FWD_SKIP_IDLE_BLOCK=0 or 1 sets it for a whole build (A/B runs).
#if defined(FLASHBUILD_HOPPER_FWD_SKIP_IDLE_BLOCK)
  static constexpr bool kSkipIdleBlock = FLASHBUILD_HOPPER_FWD_SKIP_IDLE_BLOCK != 0 && kIsCausal &&
                                         kNumMmaWarpgroups > 1 && !kHasLocal<kFeatures> && !kIsSplitKV<kFeatures>;
#else
  static constexpr bool kSkipIdleBlock = kIsCausal && kHeadDim == 64 && kNumMmaWarpgroups > 1 &&
                                         (kFeatures & kAllFeatures) == 0 && !kIsSplitKV<kFeatures>;
#endif

  // kEarlyQDone (the steps without kOverlapSoftmax): q_done() (sQ free for the next tile's Q) as soon as the tile's
  // last Q K^T is waited on, in the last step before its softmax, rather than after the walk. The producer's Q load of
  // the next tile waits on every consumer's q_done (kQueryEmpty), and a consumer's next tile on that load: with
  // 1-8 steps a tile (hdim 64, 1k) the load's latency is paid once a tile, and this starts it one softmax earlier.
  // A compare and a branch around a barrier arrive in each step (no wgmma or wgmma wait in it). In turns on the H200
  // (benchmarks/fwd_short_hdim64, call h200-2, hdim 64 causal, fp16 / bf16): alone 1.007 / 1.003x at 1k, 0.999-1.018x
  // from 2k; with kSkipIdleBlock 0.995 / 1.000x the skip alone at 1k and 0.992-0.994x from 2k (bf16 2k 1.000). Off;
  // nvcc -DFLASHBUILD_HOPPER_FWD_EARLY_Q_DONE=1 sets it for a whole build (A/B runs).
#if defined(FLASHBUILD_HOPPER_FWD_EARLY_Q_DONE)
  static constexpr bool kEarlyQDone = FLASHBUILD_HOPPER_FWD_EARLY_Q_DONE != 0 && !kOverlapSoftmax;
#else
  static constexpr bool kEarlyQDone = false;
#endif

  // The TMA descriptors of Q, K, V, which the host builds (fwd_params.h: the launch TU includes that
  // header, not this one).
  using Loads = FwdLoads<Traits>;
  using Params = typename Loads::Params;

  CUTE_DEVICE static void prefetch_descriptors(Params const& mp) { Loads::prefetch_descriptors(mp); }

  // The mask and the key blocks [n_block_min, n_block_max) of a query block. The mask cuts the keys
  // past the sequence's seqlen_k that a TMA box still loads: with seqused_k, the rest of its
  // seqlen_k rows; packed, the next sequence's first rows (see can_run in fwd_launch.h).
  struct Keys {
    Mask mask;
    int n_block_min;
    int n_block_max;
  };
  // The split-KV kernel (kIsSplitKV) takes slice tile.split of num_splits of them (with one split, all).
  CUTE_DEVICE static Keys keys(FwdParams const& p, SeqRange const& seq, TileCoord const& tile) {
    Keys keys{make_mask<kIsCausal, kFeatures>(p, seq.seqlen_q, seq.seqlen_k)};
    keys.n_block_min = keys.mask.n_block_min(tile.m_block, kBlockM, kBlockN);
    keys.n_block_max = keys.mask.n_block_max(tile.m_block, kBlockM, kBlockN);
    if constexpr (kIsSplitKV<kFeatures>) {
      const int per_split = (keys.n_block_max - keys.n_block_min + p.num_splits - 1) / p.num_splits;
      keys.n_block_min += tile.split * per_split;
      keys.n_block_max = min(keys.n_block_max, keys.n_block_min + per_split);
    }
    return keys;
  }

  // Where key block n_block's box starts in the K/V views: the sequence's rows, or with a paged cache
  // (kPaged: block_table set) row n_block * kBlockN % page_size of the page that holds it, a page
  // being a batch of the views (view_extents). The binding sends a paged call here only when page_size is a
  // multiple of kBlockN (run_fwd checks it), so no box straddles two pages.
  struct KeyBox {
    int row;
    int batch;
  };
  template <bool kPaged>
  CUTE_DEVICE static KeyBox key_box(FwdParams const& p, SeqRange const& seq, int batch, int n_block) {
    const int row = n_block * kBlockN;
    if constexpr (kPaged) {
      const int column = row / p.page_size;
      int page = p.block_table[int64_t(batch) * p.block_table_batch_stride + column];
      if constexpr (kIsSplitKV<kFeatures>) {  // the caller's table (CacheIndexCheck::at_read): clamped where read
        const CacheIndexCheck& c = p.index_check;
        if (c.at_read) { page = checked_index(page, c.num_cache_rows - 1, c.error, IndexArg::kBlockTable, column, batch); }
      }
      return {row % p.page_size, page};
    } else {
      return {seq.k_row0 + row, seq.k_batch};
    }
  }

  // K/V multicast (fwd_params.h, kMulticastKV): the launch decides per call whether this kernel runs in clusters of two.
  static constexpr bool kMulticast = kMulticastKV<Traits, kIsCausal, kFeatures>;
  // A producer's share of the K/V boxes: the CTAs of its cluster (1, or 2 with kMulticast), and whether it issues the
  // boxes (multicast into every CTA of the cluster when there are two) or only arms its own barriers (the second CTA).
  struct KVShare {
    int ctas = 1;
    bool issues = true;
  };

  // ---------------------------------------------------------------------------------------------
  // Producer: called by the whole producer warp; `leader` (one lane) issues the copies.
  // o_phase: the parity of the o_read barrier's next phase (Traits::kOAliasesV), kept across tiles.
  template <bool kPaged, class Storage>
  CUTE_DEVICE static void load(Params const& mp, FwdParams const& p, Storage& storage, PipelineKV& pipe_k,
                               PipelineKV& pipe_v, PipelineState& write, TileCoord tile, SeqRange const& seq,
                               bool first_tile, bool leader, uint32_t& o_phase, KVShare share = {}) {
    const Keys k = keys(p, seq, tile);
    const int head_k = tile.head / (p.nheads / p.nheads_k);

    // Coordinate tensors: only the coordinates of each box's first element are read (tma_load_box).
    Tensor mQ = mp.tma_q.get_tma_tensor(make_shape(p.seqlen_q, int32_t(kHeadDim), p.nheads, p.batch));
    Tensor mK = mp.tma_k.get_tma_tensor(make_shape(p.seqlen_k, int32_t(kHeadDim), p.nheads_k, p.batch));
    Tensor mV = mp.tma_v.get_tma_tensor(make_shape(p.seqlen_k, int32_t(kHeadDim), p.nheads_k, p.batch));
    Tensor sQ = make_tensor(make_smem_ptr(storage.q.data()), SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(storage.k.data()), SmemLayoutK{});
    Tensor sV = make_tensor(make_smem_ptr(storage.v.data()), SmemLayoutV{});

    // With two CTAs (kMulticast, share.ctas 2) the first one's producer issues each box once, into both CTAs' rings;
    // the second one's acquires the same stages and arms its own barrier with the whole box's bytes, which the
    // multicast completes. The consumers release a stage to their own CTA alone, as in a launch without a cluster;
    // the second producer, once its consumers released a stage, tells the first one by an arrival on the first CTA's
    // `peer` barrier of that stage, which the first waits on (the parity of the stage's round) before its copies land
    // in the second CTA's ring. So the consumers' code is the same in both launches.
    auto acquire = [&](PipelineKV& pipe, auto peer_of) {
      pipe.producer_acquire(write);
      if constexpr (kMulticast) {
        if (share.ctas > 1) {
          uint64_t* peer = peer_of(storage) + write.index();
          if (share.issues) {
            cluster_wait_acquire(peer, write.phase() ^ 1);
          } else if (leader) {
            cluster_arrive_release(peer, 0);
          }
        }
      }
    };
    auto issue = [&](auto const& tma, uint64_t& bar, auto const& mKV, auto const& sKV, int n_block) {
      const KeyBox box = key_box<kPaged>(p, seq, tile.batch, n_block);
      if constexpr (kMulticast) {
        if (share.ctas > 1) {
          tma_load_box<kBlockN>(tma_multicast(tma, bar, uint16_t((1u << share.ctas) - 1)), mKV, box.row, head_k,
                                box.batch, sKV);
          return;
        }
      }
      tma_load_box<kBlockN>(tma.with(bar), mKV, box.row, head_k, box.batch, sKV);
    };
    auto load_k = [&](int n_block) {
      acquire(pipe_k, [](auto& st) { return st.peer_k; });
      if (leader && share.issues) { issue(mp.tma_k, *pipe_k.producer_get_barrier(write), mK, sK(_, _, write.index()), n_block); }
    };
    auto load_v = [&](int n_block) {
      acquire(pipe_v, [](auto& st) { return st.peer_v; });
      if (leader && share.issues) { issue(mp.tma_v, *pipe_v.producer_get_barrier(write), mV, sV(_, _, write.index()), n_block); }
    };

    const bool has_keys = k.n_block_max > k.n_block_min;
    // The first K tile does not depend on the consumers' previous tile: it goes out before Q,
    // which must wait until they are done with sQ.
    if (has_keys) { load_k(k.n_block_max - 1); }
    if (!first_tile) { barrier_sync(FwdBarrier::kQueryEmpty, kNumMmaThreads + cutlass::NumThreadsPerWarp); }
    if (leader) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&storage.q_full, Traits::kQBytes);
      tma_load_box<kBlockM>(mp.tma_q.with(storage.q_full), mQ, seq.q_row0 + tile.m_block * kBlockM, tile.head, seq.q_batch,
                            sQ);
    }
    // sO in V's ring: the previous tile's O must have left it (every consumer released it, the
    // store's read included) before a V lands there. Every tile but the first waits, keys or not, so
    // the consumers are never two releases ahead of this wait's parity. (Not in a kernel that runs in clusters:
    // kMulticastKV.)
    static_assert(!(Traits::kOAliasesV && kMulticast), "K/V multicast with sO in V's ring: not measured to pay");
    if constexpr (Traits::kOAliasesV) {
      if (!first_tile) {
        cutlass::arch::ClusterBarrier::wait(&storage.o_read, o_phase);
        o_phase ^= 1;
      }
    }
    if (!has_keys) { return; }
    load_v(k.n_block_max - 1);
    ++write;
    CUTE_NO_UNROLL
    for (int n_block = k.n_block_max - 2; n_block >= k.n_block_min; --n_block) {
      load_k(n_block);
      load_v(n_block);
      ++write;
    }
  }

  // Rows [first_row, kBlockN) of V's buffer `stage` set to zero. A TMA box of keys that runs past its
  // sequence's last key brings in rows the mask hides from P (P is 0 there), but P V still multiplies
  // them: rows past seqused_k hold whatever the cache held (an uninitialised one may hold NaN), and a
  // packed sequence's next rows belong to the next sequence; 0 * NaN or 0 * inf would be NaN. Each
  // warp zeroes every such row itself and fences its writes for the async proxy (wgmma reads shared
  // memory through it), so a warp's part of the next P V never waits on another warp; the warps of
  // every consumer warpgroup write the same zeros (clear_rows, utils.h: its addresses come from
  // opaque(lane), computed here, not held across the tile loop).
  template <class Storage>
  CUTE_DEVICE static void zero_v_rows(Storage& storage, int stage, int first_row, int thread_idx) {
    Tensor sV = make_tensor(make_smem_ptr(storage.v.data()), SmemLayoutV{});
    clear_rows<cutlass::NumThreadsPerWarp>(sV, first_row, thread_idx % cutlass::NumThreadsPerWarp, stage);
    cutlass::arch::fence_view_async_shared();
    __syncwarp();
  }

  // A consumer thread's release of a K or V stage. kMulticast kernels arrive on their own CTA's barrier:
  // PipelineTmaAsync's consumer_release, built for a cluster of one CTA, arrives through mapa on the barrier of the
  // cluster's first CTA, so in a cluster of two the second CTA's releases would land in the first one's (the first
  // clustered call hung so). The kernels that never run in a cluster keep it (the same SASS as before).
  template <class PipeStorage>
  CUTE_DEVICE static void release(PipelineKV& pipe, PipeStorage& pipe_storage, PipelineState const& state) {
    if constexpr (kMulticast) {
      pipe_storage.empty_barrier_[state.index()].arrive();
    } else {
      pipe.consumer_release(state);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Consumers: one warpgroup's share of a tile. thread_idx counts the consumer threads from 0;
  // warpgroup is thread_idx / 128 computed warp-uniformly (the kernel's, from cutlass::canonical_warp_group_idx);
  // tOrO receives the unnormalised O and `softmax` the row statistics (finalize() normalises).
  // q_done() runs once this warpgroup has no Q K^T left in flight: sQ may then be reloaded.
  // started() runs once the tile's first Q K^T is issued (or, with no key, Q has landed), before any
  // wait on V: the kernel releases the previous tile's sO there (FwdTraits::kReleaseOLate).
  template <class Storage, class FragO, class Softmax, class QDone, class Started>
  CUTE_DEVICE static void mma(FwdParams const& p, Storage& storage, PipelineKV& pipe_k, PipelineKV& pipe_v,
                              PipelineState& read_k, PipelineState& read_v, uint32_t& q_phase, TileCoord tile,
                              SeqRange const& seq, int thread_idx, int warpgroup, FragO& tOrO, Softmax& softmax,
                              ScoreScale<kFeatures> const& score, QDone&& q_done, Started&& started) {
    typename Traits::TiledMmaQK mma_qk;
    typename Traits::TiledMmaPV mma_pv;

    Tensor sQ = make_tensor(make_smem_ptr(storage.q.data()), SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(storage.k.data()), SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(storage.v.data()), SmemLayoutVt{});
    const auto thr_vmnk = mma_qk.get_thr_layout_vmnk().get_flat_coord(thread_idx);
    // wgmma's shared-memory operands as descriptors (utils.h): this warpgroup's rows of sQ, all of sK and sVt.
    // kUniformQ: sQ's rows picked by `warpgroup` (the kernel's, from cutlass::canonical_warp_group_idx's
    // shuffle: warp-uniform to ptxas) rather than by thread_idx / 128 (the same number), so Q's descriptors
    // live in uniform registers.
    Tensor tSrQ = Traits::TiledMmaQK::make_fragment_A(
        k_major_slices<kRowsPerWarpgroup>(sQ, kUniformQ ? warpgroup : int(get<1>(thr_vmnk))));
    Tensor tSrK = Traits::TiledMmaQK::make_fragment_B(k_major_slices<kBlockN>(sK, get<2>(thr_vmnk)));
    Tensor tOrV = Traits::TiledMmaPV::make_fragment_B(mn_major_slices<kHeadDim>(sVt, _0{}));  // (MMA, MMA_N, MMA_K, stage)

    Tensor tSrS = make_tensor<float>(AccumulatorShapeS{});
    Tensor tSrS_rc = make_tensor(tSrS.data(), acc_rowcol(tSrS.layout()));
    Tensor tOrO_rc = make_tensor(tOrO.data(), acc_rowcol(tOrO.layout()));
    // P in the register A-operand layout of O += P V; its storage order is tSrS's.
    Tensor tOrP = make_tensor<Element>(acc_to_a_operand(tSrS.layout()));
    static_assert(decltype(size(tOrP))::value == decltype(size(tSrS))::value, "P and S hold the same values");
    Tensor cS = accumulator_coords<kBlockN, kNumMmaWarpgroups>(thr_vmnk);

    const Keys k = keys(p, seq, tile);
    // Keys of the first (last-in-sequence) block past seqlen_k that the box loads from memory rather
    // than zero-fills (TMA fills only past the end of a view): zero_v_rows clears them.
    const int v_rows_valid = seq.seqlen_k - (k.n_block_max - 1) * kBlockN;
    // The split-KV kernel's boxes read a cache whose rows past the keys (left padding aside) hold anything.
    const bool zero_v = (kIsSplitKV<kFeatures> || p.cu_seqlens_k || p.seqused_k) && v_rows_valid < kBlockN;
    constexpr int kRows = decltype(size<0>(tSrS_rc))::value;
    float row_scale[kRows];

    // Raw Q K^T -> masked (transformed) scores. `masked`: std::true_type (mask every element),
    // std::false_type (no mask code), or MaskByBlock (needs_mask decides at run time).
    auto apply_mask = [&](int n_block) {
      if constexpr (kRowLimits) {
        // Row r of this thread is tile row cS_rc(r, 0)'s; column c is the thread's first column plus a
        // constant of the fragment's layout (cS_rc(r, c) - cS_rc(0, 0) folds to it; a column is the same in
        // every row).
        Tensor cS_rc = make_tensor(cS.data(), acc_rowcol(cS.layout()));
        const int col0 = n_block * kBlockN + int(get<1>(cS_rc(0, 0)));
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          int limit = k.mask.seqlen_k;  // keys >= limit are hidden from this row
          if constexpr (kIsCausal) {
            limit = min(limit, k.mask.last_key(tile.m_block * kBlockM + int(get<0>(cS_rc(r, 0)))) + 1);
          }
          limit -= col0;
          CUTE_UNROLL
          for (int c = 0; c < size<1>(tSrS_rc); ++c) {
            if (int(get<1>(cS_rc(r, c))) - int(get<1>(cS_rc(0, 0))) >= limit) { tSrS_rc(r, c) = -INFINITY; }
          }
        }
      } else {
        k.mask.apply(tSrS, cS, tile.m_block * kBlockM, n_block * kBlockN);
      }
    };
    auto scores = [&](int n_block, auto masked) {
      score.transform(tSrS);
      mask_step(masked, [&] { return k.mask.needs_mask(tile.m_block, n_block, kBlockM, kBlockN); },
                [&] { apply_mask(n_block); });
    };
    auto to_p = [&]() { convert_into(tSrS, tOrP); };  // probabilities to the element type, into P's registers
    auto wait_turn = [&]() {
      if constexpr (Traits::kPingpong) { barrier_sync(warpgroup_turn(warpgroup), 2 * kWarpgroupThreads); }
    };
    auto pass_turn = [&]() {
      if constexpr (Traits::kPingpong) {
        barrier_arrive(warpgroup_turn((warpgroup + 1) % kNumMmaWarpgroups), 2 * kWarpgroupThreads);
      }
    };
    // A tile's first Q K^T and last P V: a turn each with kEdgeTurns.
    auto wait_edge_turn = [&]() {
      if constexpr (kEdgeTurns) { wait_turn(); }
    };
    auto pass_edge_turn = [&]() {
      if constexpr (kEdgeTurns) { pass_turn(); }
    };
    // Inside a step: with kLeadWaits the first warpgroup alone waits for the stage.
    auto step_wait = [&](PipelineKV& pipe, PipelineState& read) {
      if (!kLeadWaits || warpgroup == 0) { pipe.consumer_wait(read); }
    };

    clear(tOrO);
    cutlass::arch::ClusterTransactionBarrier::wait(&storage.q_full, q_phase);
    q_phase ^= 1;
    if (k.n_block_max <= k.n_block_min) {  // no key visible: O = 0, LSE = +inf
      started();
      q_done();
      return;
    }

    // First key block: S, then its softmax (nothing to rescale yet).
    int n_block = k.n_block_max - 1;
    bool zero_first_v = zero_v;
    [[maybe_unused]] bool skipped = false;
    if constexpr (kSkipIdleBlock) {
      // This warpgroup's last row (of the view: SeqRange::bottom_aligned) sees no key of the block: its stages
      // released unread, one turn, and the next block is its first (see kSkipIdleBlock).
      const int last_row = tile.m_block * kBlockM + (warpgroup + 1) * kRowsPerWarpgroup - 1;
      if (k.mask.last_key(last_row) < n_block * kBlockN && n_block > k.n_block_min) {
        pipe_k.consumer_wait(read_k);
        if constexpr (!kSkipTurnLate) { wait_turn(), pass_turn(); }
        started();  // again below: the kernel's release of sO is made once (o_owed)
        release(pipe_k, storage.pipeline_k, read_k);
        ++read_k;
        // Waited on before the release: a release ahead of the stage's fill would count towards its previous use.
        pipe_v.consumer_wait(read_v);
        release(pipe_v, storage.pipeline_v, read_v);
        ++read_v;
        --n_block;
        zero_first_v = false;  // v_rows_valid is the skipped block's; the other warpgroups clear its rows
        skipped = true;
      }
    }
    pipe_k.consumer_wait(read_k);
    if (kSkipTurnLate && skipped) { wait_turn(), pass_turn(); }
    wait_edge_turn();
    if constexpr (kSkipIdleQK) {
      // This warpgroup's last row (of the view: SeqRange::bottom_aligned) and the block's first key.
      const int last_row = tile.m_block * kBlockM + (warpgroup + 1) * kRowsPerWarpgroup - 1;
      if (k.mask.last_key(last_row) >= n_block * kBlockN) {
        wgmma<-1, false>(mma_qk, tSrQ, tSrK(_, _, _, read_k.index()), tSrS, true);
      }
    } else {
      wgmma<-1, false>(mma_qk, tSrQ, tSrK(_, _, _, read_k.index()), tSrS, true);
    }
    pass_edge_turn();
    started();
    warpgroup_wait<0>();
    release(pipe_k, storage.pipeline_k, read_k);
    ++read_k;
    scores(n_block, MaskByBlock{});
    softmax.template step<true>(tSrS_rc, row_scale);
    if constexpr (!kOverlapSoftmax) { to_p(); }  // with it, at the top of the loop's first step
    // The first P V reads this block's V: clear its rows past the keys first. Here, before the loop,
    // not at that P V inside it, where the dense hdim-64 forward ran 1.8-2.5 % slower than without
    // the clearing (here 0.6-1.8 %; benchmarks/hopper_varlen). The loop's wait on this stage then
    // finds it full.
    if (zero_first_v) {
      pipe_v.consumer_wait(read_v);
      zero_v_rows(storage, read_v.index(), v_rows_valid, thread_idx);
    }

    // The steps after the first: with kPeelMasked the masked ones (while needs_mask holds: they are
    // the first walked), then the rest unmasked; otherwise one loop that tests every block. Two call
    // sites of `step` at most per instantiation (see kPeelMasked).
    auto walk = [&](auto&& step) {
      if constexpr (kPeelMasked) {
        CUTE_NO_UNROLL
        for (--n_block; n_block >= k.n_block_min && k.mask.needs_mask(tile.m_block, n_block, kBlockM, kBlockN);
             --n_block) {
          step(n_block, std::true_type{});
        }
        CUTE_NO_UNROLL
        for (; n_block >= k.n_block_min; --n_block) { step(n_block, std::false_type{}); }
      } else {
        CUTE_NO_UNROLL
        for (--n_block; n_block >= k.n_block_min; --n_block) { step(n_block, MaskByBlock{}); }
      }
    };

    if constexpr (kOverlapSoftmax) {
      // The same steps with the wait on P V, O's rescale and P's conversion moved from the end of a
      // step to the start of the next (across the loop's back edge, where ptxas does not move the
      // wait): the softmax of S_j then runs under this warpgroup's P_{j-1} V (fwd_traits.h,
      // kOverlapSoftmax). In the first step the wait finds nothing in flight, O (zero) is scaled by
      // 1 and P converted from the first block's S.
      bool pv_in_flight = false;
      walk([&](int block, auto masked) {
        warpgroup_wait<0>();  // the last P V is done: O may be rescaled and P overwritten
        if (pv_in_flight) {
          release(pipe_v, storage.pipeline_v, read_v);
          ++read_v;
        }
        Softmax::rescale(tOrO_rc, row_scale);
        to_p();
        step_wait(pipe_k, read_k);
        wait_turn();
        wgmma<-1, false>(mma_qk, tSrQ, tSrK(_, _, _, read_k.index()), tSrS, true);
        if constexpr (kPassAfterQK) { pass_turn(); }
        step_wait(pipe_v, read_v);
        wgmma<-1, true>(mma_pv, tOrP, tOrV(_, _, _, read_v.index()), tOrO, false);
        if constexpr (!kPassAfterQK) { pass_turn(); }
        pv_in_flight = true;
        warpgroup_wait<1>();  // S is ready; P V runs on under the softmax
        release(pipe_k, storage.pipeline_k, read_k);
        ++read_k;
        scores(block, masked);
        softmax.template step<false>(tSrS_rc, row_scale);
      });
      q_done();  // every S of this tile is computed (the last one waited on above)
      warpgroup_wait<0>();
      if (pv_in_flight) {
        release(pipe_v, storage.pipeline_v, read_v);
        ++read_v;
      }
      Softmax::rescale(tOrO_rc, row_scale);
      to_p();
    } else {
      const bool walks = n_block > k.n_block_min;  // a step at least after the first block (kEarlyQDone)
      walk([&](int block, auto masked) {
        step_wait(pipe_k, read_k);
        wait_turn();
        wgmma<-1, false>(mma_qk, tSrQ, tSrK(_, _, _, read_k.index()), tSrS, true);
        step_wait(pipe_v, read_v);
        wgmma<-1, true>(mma_pv, tOrP, tOrV(_, _, _, read_v.index()), tOrO, false);
        pass_turn();
        warpgroup_wait<1>();  // S is ready; P V may still run
        release(pipe_k, storage.pipeline_k, read_k);
        ++read_k;
        if constexpr (kEarlyQDone) {
          if (block == k.n_block_min) { q_done(); }  // the tile's last S is computed
        }
        scores(block, masked);
        softmax.template step<false>(tSrS_rc, row_scale);
        warpgroup_wait<0>();  // P V done: O may be rescaled and P overwritten
        release(pipe_v, storage.pipeline_v, read_v);
        ++read_v;
        Softmax::rescale(tOrO_rc, row_scale);
        to_p();
      });
      if (!kEarlyQDone || !walks) { q_done(); }  // every S of this tile is computed (the last one waited on above)
    }

    // The last key block's P V.
    pipe_v.consumer_wait(read_v);
    wait_edge_turn();
    wgmma<-1, true>(mma_pv, tOrP, tOrV(_, _, _, read_v.index()), tOrO, false);
    pass_edge_turn();
    warpgroup_wait<0>();
    release(pipe_v, storage.pipeline_v, read_v);
    ++read_v;
  }
};

}  // namespace flashbuild::hopper
