// Tile shapes, shared-memory layouts, MMA types and the register split of the Hopper (sm_90a)
// backward kernel: one producer warpgroup (TMA loads) and two consumer warpgroups (wgmma).
//
// The products of one step (a query block of kBlockM rows against the CTA's keys), transposed so
// that keys are the rows (the M of every wgmma that accumulates per key):
//   S^T  = K Q^T      (SS: K and Q from shared memory)        (kBlockN, kBlockM)
//   dP^T = V dO^T     (SS)                                     (kBlockN, kBlockM)
//   dV  += P^T dO     (P^T from registers or shared memory)    (kBlockN, d)
//   dK  += dS^T Q     (dS^T from registers or shared memory)   (kBlockN, d)
//   dQ   = dS K       (SS: dS^T and K both read transposed)    (kBlockM, d), added to dq_accum
// How the two consumer warpgroups share that work (BwdSplit):
//   kKeys (head dims up to 128): each owns 64 of the CTA's 128 keys, in every product but dQ. With
//   keys as rows, P^T and dS^T come out of S^T / dP^T's accumulators in exactly the register layout
//   of an RS wgmma's A operand, so only dS goes through shared memory (for dQ).
//   kHeadDim (head dims above 128): the CTA has 64 keys; each warpgroup computes S^T and dP^T for
//   half the query rows and dK, dV, dQ for half the head dim. dK and dV then hold d / 2 floats each
//   per thread (by keys they would hold d each: 512 registers at d = 256); the price is that P^T
//   and dS^T go through shared memory, since each warpgroup's dK and dV need both halves' rows.
#pragma once

#include "hopper/gmma_extra.h"  // ss_mma_op
#include "hopper/sm90.h"  // k_major_smem_atom, warpgroup constants

namespace flashbuild::hopper {

// How dq_accum holds a query block's (kBlockM, d) floats (BwdParams leaves the order inside a block
// to the family; only this family's conversion reads it):
//   kRowMajor: row by row; each thread adds two adjacent columns per reduction (a warp touches 8
//   rows, 32 bytes each);
//   kFragment: in the dQ product's register order, four floats per thread per reduction, so that a
//   warp's reduction covers 512 contiguous bytes (whole cache lines), as the Ampere path does;
//   kFragmentBulk: the same order, but the consumers only write the block into shared memory and a
//   second producer warp adds it to dq_accum with one bulk reduction (cp.reduce.async.bulk), so no
//   consumer thread issues a global reduction.
// On the H200 (benchmarks/hopper_bwd/README.md, run 1, fp16, 16k tokens), against kRowMajor timed
// in the same rounds: kFragment +26% (hdim 64) / +29% (hdim 128) at seqlen 16k, kFragmentBulk +23%
// / +36%, causal +19% / +32%. kFragmentBulk is the default (kFragment was 4% ahead of it at hdim
// 64 non-causal, 16k, in the ratio to cuDNN; its causal runs were not measured).
enum class DqOrder : int { kRowMajor, kFragment, kFragmentBulk };

constexpr int kBwdStages = 2;  // Q/dO buffers by default: the next query block loads during this one

struct BwdTile {
  int block_m;       // query rows per step (streamed)
  int block_n;       // key rows per CTA (dK and dV accumulate in registers for these)
  DqOrder dq_order;  // how dQ reaches dq_accum
  bool dq_first;     // kKeys: dQ's product before dK's (BwdTraits::kDqFirst)
  bool ds_first;     // kKeys: dS^T stored before dV's product is issued (BwdTraits::kDsFirst)
  bool tma_first;    // the producer issues a stage's Q/dO copies before its LSE/dsum loads (BwdTraits::kTmaFirst)
  bool dq_halves;    // kFragmentBulk: each consumer warpgroup hands its half of dQ on alone (BwdTraits::kDqHalves)
  int stages;        // Q/dO buffers (BwdTraits::kStages)
};

// Registers per consumer thread, kKeys (64 keys per warpgroup): dK and dV hold d / 2 floats each,
// S^T and dP^T block_m / 2 each, the dQ share block_m * d / 256, P^T and dS^T block_m / 4 words each:
// hdim 64 with 128-row query blocks and hdim 128 with 64-row ones both come to about 200 of the 240
// (ptxas: no spills). Shared memory: K, V, two stages of Q and dO, two dS buffers (and a dQ buffer
// with DqOrder::kFragmentBulk): 144 KB at hdim 64, 160 KB at hdim 128.
// kHeadDim (head dims 192 and 256; 64 keys, 64 query rows): dK and dV d / 4 floats each, S^T and dP^T
// 16 each, the dQ share d / 4 (dK, dV and dQ: 192 floats at hdim 256; ptxas: no spills). Shared
// memory: K, V, two stages of Q and dO and two buffers each of P^T and dS^T come to 176 KB at hdim 192,
// with kFragmentBulk's 48 KB dQ buffer 225 KB (1.04-1.09x kFragment there, and in deterministic mode
// the writer warp, not the consumers, waits for the turn: benchmarks/hopper_bwd_split/README.md); at
// hdim 256 they come to 225 KB alone, no room for a 64 KB dQ buffer: with one dO stage, 32 KB hold one
// warpgroup's half of dQ, and the halves go to the writer warp in turn (kDqInTurn, below); with
// -DFLASHBUILD_HOPPER_BWD_HDIM256_DQ=0 dQ leaves by kFragment's reductions from registers.
// dQ first (kDqFirst) for head dims 64 to 128: on the H200 (benchmarks/hopper_bwd/README.md, "dQ first"),
// against the other order in the same rounds, hdim 128 fp16 gained 4-8 % (1.06-1.08x from 4k, causal or
// not); hdim 96: the old order ran at 0.94-0.98x the new one (1k-16k, causal or not). hdim 64 (128-row
// query blocks) takes it together with dS first (kDsFirst), FlashAttention-3's step there: each alone moved
// it -1 to +2 % (and spilled 4 bytes), both together gained 3.6-7.2 % at 1k-16k, causal or not, with no
// spills (benchmarks/hopper_bwd_fa3/README.md, fp16, in turns with the old step); dS first at hdim 128 was
// 0.98x (benchmarks/hopper_bwd/README.md, "Tried: dS^T stored before dV's product").
// Tuning sweeps override it for a whole build:
//   nvcc -DFLASHBUILD_HOPPER_BWD_BLOCK_M=64 -DFLASHBUILD_HOPPER_BWD_BLOCK_N=128
constexpr BwdTile bwd_tile(int head_dim) {
  constexpr DqOrder kBySplit[2] = {DqOrder::kFragmentBulk, DqOrder::kFragment};
  const bool dq_first = head_dim <= 128;
  const bool ds_first = head_dim <= 64;
  // Each warpgroup's dQ handed on alone (kDqHalves): 1.025-1.069x at hdim 128 in turns with the shared hand-off
  // (H200, fp16, 1k-16k, causal or not); at hdim 64 together with the copies first (kTmaFirst) 1.041-1.069x from
  // 4k but 1.005 at 16k non-causal, 1.05 at 1k (4 bytes spilled: the barrier id). The copies first alone:
  // 0.99-1.03 at hdim 64/128, 0.985-0.989 at hdim 256 from 4k; three Q/dO stages at hdim 128: 0.93-1.02
  // (benchmarks/hopper_bwd_hand_off/README.md). hdim 96 (the same split), each warpgroup's dQ handed on alone against the
  // shared hand-off, in turns on the H200: 1.019-1.029x at 1k, 1.027-1.035x at 4k, 1.035-1.054x at 16k (fp16 and bf16,
  // causal or not, every round above 1.01; deterministic gradients bitwise equal); with the copies first too 1.031-1.038x
  // at 1k but 1.026-1.031x at 4k and 1.031-1.051x at 16k, so the halves alone (benchmarks/hopper_bwd_untimed/, h200-1).
  // hdim 192's halves (its kHeadDim split, the 48 KB dQ buffer) ran 0.998-1.005x: not taken.
  // hdim 128, the copies first on top of its halves (benchmarks/hopper_bwd_untimed/, h200-3): 1.011-1.013x at 1k,
  // 1.004x at 4k, 1.004-1.006x at 16k, fp16 and bf16, causal or not (36 of 36 rounds at 1.000 or above).
  bool tma_first = head_dim == 64 || head_dim == 128;
  const int stages = kBwdStages;
#if !defined(FLASHBUILD_HOPPER_BWD_HDIM256_DQ) || FLASHBUILD_HOPPER_BWD_HDIM256_DQ
  // hdim 256's dQ through the writer warp's bulk reductions, each warpgroup's half in turn through one 32 KB buffer,
  // one dO stage (BwdTraits::kDqInTurn): on the H200 against the consumers' atomics, in turns, 1.008-1.032x at 16k,
  // 1.009-1.024x at 4k, 0.999-1.009x at 1k, fp16 and bf16, causal or not; deterministic gradients bitwise equal
  // (benchmarks/hopper_bwd_hdim256_dq/, h200-1). nvcc -DFLASHBUILD_HOPPER_BWD_HDIM256_DQ=0 keeps the atomics.
  constexpr DqOrder kHdim256 = DqOrder::kFragmentBulk;
  bool dq_halves = head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
#else
  constexpr DqOrder kHdim256 = kBySplit[1];
  bool dq_halves = head_dim == 64 || head_dim == 96 || head_dim == 128;
#endif
  // For A/B runs of one head dim's build (benchmarks/hopper_bwd_untimed): each sets its field for every head dim of the
  // build (nvcc -DFLASHBUILD_HOPPER_BWD_DQ_HALVES=0 or 1, -DFLASHBUILD_HOPPER_BWD_TMA_FIRST=0 or 1).
#ifdef FLASHBUILD_HOPPER_BWD_DQ_HALVES
  dq_halves = FLASHBUILD_HOPPER_BWD_DQ_HALVES != 0;
#endif
#ifdef FLASHBUILD_HOPPER_BWD_TMA_FIRST
  tma_first = FLASHBUILD_HOPPER_BWD_TMA_FIRST != 0;
#endif
#if defined(FLASHBUILD_HOPPER_BWD_BLOCK_M) && defined(FLASHBUILD_HOPPER_BWD_BLOCK_N)
  return {FLASHBUILD_HOPPER_BWD_BLOCK_M, FLASHBUILD_HOPPER_BWD_BLOCK_N, kBySplit[head_dim > 128], dq_first, ds_first,
          tma_first, dq_halves, stages};
#else
  return head_dim <= 64    ? BwdTile{128, 128, kBySplit[0], dq_first, ds_first, tma_first, dq_halves, stages}
         : head_dim <= 128 ? BwdTile{64, 128, kBySplit[0], dq_first, ds_first, tma_first, dq_halves, stages}  // hdim 96: 152 KB, no spills
         : head_dim <= 192 ? BwdTile{64, 64, DqOrder::kFragmentBulk, dq_first, ds_first, tma_first, dq_halves, stages}  // kHeadDim with the dQ buffer: 225 KB
                           : BwdTile{64, 64, kHdim256, dq_first, ds_first, tma_first, dq_halves, stages};
#endif
}

// How the consumer warpgroups share a step's products (top of this file).
enum class BwdSplit : int { kKeys, kHeadDim };
constexpr BwdSplit bwd_split(int head_dim) { return head_dim <= 128 ? BwdSplit::kKeys : BwdSplit::kHeadDim; }

// Named barriers of the backward kernel (ids after CUTLASS's reserved ones).
enum class BwdBarrier : int {
  kdSFull = 0,   // both consumer warpgroups wrote their dS^T rows: dQ = dS K may read them
  kdQEmpty = 1,  // kFragmentBulk: the dQ writer's bulk reduction has read sdQ: it may be rewritten
  kdQFull = 2,   // kFragmentBulk: the consumers wrote the block's dQ into sdQ
  kdQTurn = 3,   // deterministic mode, dQ from the consumers: the block's turn came / its adds are done
  // kDqHalves: kdQEmpty / kdQFull are warpgroup 0's pair (the writer warp and that warpgroup alone), these
  // warpgroup 1's.
  kdQEmpty1 = 4,
  kdQFull1 = 5,
  // BwdEpilogue::kStagedDkv (from hdim 96): every consumer is past its last product (the staging may overwrite K, V,
  // Q), and, again, has written its dK, dV rows into shared memory (bwd_epilogue.h, stage_dkv).
  kdKVStaged = 6,
};

constexpr int kBwdConsumerWarpgroups = 2;

// kDeferDq: a step's dQ reductions are issued in the next step, after its S^T and dP^T products,
// so that they leave while the tensor cores work (dQ's registers stay live across the step
// boundary); otherwise right after the dQ product.
// kDqFirst (kKeys): after the barrier, dQ's product is issued before dK's, and the step's dQ is handed
// on (add_dq) while dK's product runs; otherwise dK's is issued before the barrier and dQ's after it,
// and the hand-off waits for both, with the tensor cores idle until the next step's S^T.
// kDsFirst (kKeys): dS^T is stored to shared memory before dV's product is issued, not under it (with
// kDqFirst, FlashAttention-3's step at hdim 64).
// kTmaFirst: the producer warp arms a stage's barrier and issues its Q and dO copies as soon as the stage is
// free, and loads the rows' LSE and dsum under them; otherwise the loads first (a global round trip before
// the copies start).
// kDqHalves (kFragmentBulk): sdQ and each block of dq_accum hold warpgroup 0's half of the block's dQ, then
// warpgroup 1's; each warpgroup hands its half to the writer warp on a barrier pair of its own, and the
// writer adds each half by its own bulk reduction (L2 evict-last), so the warpgroups never wait for each
// other at the hand-off; otherwise the halves interleave and all consumers share one pair.
template <int kHeadDim_, int kBlockM_, int kBlockN_, class Element_, DqOrder kDqOrder_ = DqOrder::kFragmentBulk,
          bool kDeferDq_ = false, bool kDqFirst_ = false, bool kDsFirst_ = false, bool kTmaFirst_ = false,
          bool kDqHalves_ = false, int kStages_ = kBwdStages>
struct BwdTraits {
  using Element = Element_;
  static constexpr DqOrder kDqOrder = kDqOrder_;
  static constexpr bool kDeferDq = kDeferDq_;
  static constexpr bool kDqFirst = kDqFirst_;
  static constexpr bool kDsFirst = kDsFirst_;
  static constexpr bool kTmaFirst = kTmaFirst_;
  static constexpr bool kDqHalves = kDqHalves_ && kDqOrder_ == DqOrder::kFragmentBulk;
  static constexpr bool kDqBulk = kDqOrder == DqOrder::kFragmentBulk;
  static constexpr bool kDqFragmentOrder = kDqOrder != DqOrder::kRowMajor;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // kDqInTurn (kFragmentBulk at hdim 256, the default; benchmarks/hopper_bwd_hdim256_dq/): K, V, two stages of
  // Q and dO and the P^T, dS^T buffers take 225 KB of the 227, so the 64 KB block of dQ does not fit. With one dO
  // stage (FlashAttention-3's Stages_dO = 1 at hdim 256) 32 KB are free: sdQ holds one warpgroup's half (64 x 128
  // floats), warpgroup 0's first, then, once the writer warp's bulk reduction has read it, warpgroup 1's. dO then
  // has barriers of its own (BwdMainloop: the next block's dO loads once this one's dV product has read it, while
  // its Q has a stage ahead as before). Outside deterministic mode only warpgroup 0's half goes through sdQ
  // (BwdEpilogue::kDqHybrid).
  static constexpr bool kDqInTurn = kDqOrder_ == DqOrder::kFragmentBulk && kDqHalves_ && kHeadDim_ == 256;
  static constexpr int kStagesdO = kDqInTurn ? 1 : kStages;

  static constexpr int kNumMmaWarpgroups = kBwdConsumerWarpgroups;
  static constexpr int kNumMmaThreads = kNumMmaWarpgroups * kWarpgroupThreads;
  static constexpr int kNThreads = kNumMmaThreads + kWarpgroupThreads;  // + the producer warpgroup

  static constexpr BwdSplit kSplit = bwd_split(kHeadDim);
  static constexpr bool kSplitHeadDim = kSplit == BwdSplit::kHeadDim;
  static_assert(!(kDeferDq && kDqFirst), "kDeferDq and kDqFirst place the same hand-off: one of them");
  static_assert(!(kSplitHeadDim && (kDeferDq || kDqFirst)), "kHeadDim issues dQ first already, and never defers it");
  static_assert(!(kSplitHeadDim && kDsFirst), "kHeadDim stores P^T and dS^T before its products already");
  // The warpgroups' places in S^T and dP^T (keys x query rows) and in dK, dV (keys x head_dim): stacked
  // in M (keys) for kKeys, side by side in N for kHeadDim; each warpgroup's share is one wgmma of
  // 64 rows and k*AtomN columns.
  static constexpr int kKeyWarpgroups = kSplitHeadDim ? 1 : kNumMmaWarpgroups;
  static constexpr int kColWarpgroups = kNumMmaWarpgroups / kKeyWarpgroups;
  static constexpr int kSdPAtomN = kBlockM / kColWarpgroups;
  static constexpr int kDkvAtomN = kHeadDim / kColWarpgroups;

  static_assert(kBlockN == kKeyWarpgroups * kRowsPerWarpgroup, "each warpgroup's products take 64 key rows");
  static_assert(kBlockM == 64 || kBlockM == 128, "block_m must be 64 or 128 (wgmma N, dq_accum's row slack)");
  static_assert(kDqAccumRowPad % kBlockM == 0, "dq_accum's slack rows must hold a whole query block");
  static_assert(kSplitHeadDim ? (kHeadDim == 192 || kHeadDim == 256) : (kHeadDim % 32 == 0 && kHeadDim >= 64),
                "the Hopper backward serves head dims 64, 96, 128, 192 and 256");

  // setmaxnreg: the producer warpgroup (one loading warp, one dQ-writing warp) gives its registers
  // to the consumers.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(kProducerRegs * kWarpgroupThreads + kConsumerRegs * kNumMmaThreads <= kRegisterFile,
                "setmaxnreg counts overflow the register file");

  using WarpgroupLayout = Layout<Shape<Int<kKeyWarpgroups>, Int<kColWarpgroups>, _1>>;

  using TiledMmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kRowsPerWarpgroup>, Int<kSdPAtomN>, Int<kHeadDim>>>(),
      WarpgroupLayout{}));
  // B (dO or Q) is read with the query rows as K: head_dim (its N) is the contiguous one. A (P^T or
  // dS^T) is in registers (kKeys) or in shared memory with the query rows contiguous (kHeadDim).
  using DkvAtomShape = Shape<Int<kRowsPerWarpgroup>, Int<kDkvAtomN>, Int<kBlockM>>;
  using TiledMmadKV = decltype(make_tiled_mma(
      conditional_t<kSplitHeadDim,
                    decltype(GMMA::ss_op_selector<Element, Element, float, DkvAtomShape, GMMA::Major::K, GMMA::Major::MN>()),
                    decltype(GMMA::rs_op_selector<Element, Element, float, DkvAtomShape, GMMA::Major::K, GMMA::Major::MN>())>{},
      WarpgroupLayout{}));
  // dQ: the two warpgroups split the (kBlockM, d) tile, along the query rows when there are 128
  // of them, else along head_dim. A (dS, stored as dS^T) has the query rows contiguous, B (K) the
  // head_dim: both MN-major.
  static constexpr int kDqWarpgroupsM = kBlockM / kRowsPerWarpgroup;
  static constexpr int kDqWarpgroupsN = kNumMmaWarpgroups / kDqWarpgroupsM;
  static constexpr int kDqAtomN = kHeadDim / kDqWarpgroupsN;
  static_assert(kDqWarpgroupsM * kRowsPerWarpgroup == kBlockM && kDqWarpgroupsN * kDqAtomN == kHeadDim,
                "one dQ wgmma per warpgroup covers the (kBlockM, d) tile (the accumulators are written out)");
  using TiledMmadQ = decltype(make_tiled_mma(
      ss_mma_op<Element, kDqAtomN, kBlockN, GMMA::Major::MN, GMMA::Major::MN>(),  // hdim 96: N = 48, ours
      Layout<Shape<Int<kDqWarpgroupsM>, Int<kDqWarpgroupsN>, _1>>{}));

  // K, Q and dO are also read transposed (head_dim as the MN of dK, dV and dQ), a warpgroup's share of
  // the head dim at a time: the share must be whole swizzle atoms (hdim 192's halves: 96 columns, the
  // 64-byte atom; hdim 96's dQ halves: 48 columns, the 32-byte atom).
  using SmemAtom = decltype(k_major_smem_atom<Element, (kSplitHeadDim ? kDkvAtomN : kDqAtomN)>());
  using SmemLayoutK = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutV = SmemLayoutK;
  // K seen as (head_dim, keys): the B operand of dQ = dS K.
  using SmemLayoutKt = decltype(composition(
      SmemLayoutK{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Step<_2, _1>{})));
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutdO = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStagesdO>>{}));
  // Q and dO seen as (head_dim, query rows, stage): the B operands of dK and dV.
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{}, Step<_2, _1, _3>{})));
  using SmemLayoutdOt = decltype(composition(
      SmemLayoutdO{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStagesdO>>{}, Step<_2, _1, _3>{})));
  // dS^T as the consumers write it, (keys, query rows) with the query rows contiguous; two
  // buffers, so that writing the next step's dS never waits for this step's dQ product.
  using SmemAtomdS = decltype(k_major_smem_atom<Element, kBlockM>());
  using SmemLayoutdS = decltype(tile_to_shape(SmemAtomdS{}, Shape<Int<kBlockN>, Int<kBlockM>, _2>{}));
  // kHeadDim: P^T as well, in buffers of the same layout (the A operand of dV += P^T dO).
  using SmemLayoutP = SmemLayoutdS;
  // The same buffers as dS, (query rows, keys, buffer): the A operand of dQ = dS K.
  using SmemLayoutdSt = decltype(composition(
      SmemLayoutdS{}, make_ordered_layout(Shape<Int<kBlockM>, Int<kBlockN>, _2>{}, Step<_2, _1, _3>{})));

  static constexpr int kQdOStageBytes = 2 * kBlockM * kHeadDim * int(sizeof(Element));  // Q + dO of one stage
  static constexpr int kTileBytes = kBlockM * kHeadDim * int(sizeof(Element));  // kDqInTurn: Q or dO alone
  static constexpr int kKVBytes = 2 * kBlockN * kHeadDim * int(sizeof(Element));

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutV>> v;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutdO>> d_o;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutdS>> ds;
    // kFragmentBulk: one block's dQ, fragment order (kDqInTurn: one warpgroup's half at a time).
    alignas(128) float dq[kDqBulk ? kBlockM * kHeadDim / (kDqInTurn ? kNumMmaWarpgroups : 1) : 4];
    // Per stage: the query rows' LSE (times log2 e; +inf past seqlen_q) and dsum (0 past it).
    alignas(16) float lse_log2[kStages][kBlockM];
    alignas(16) float dsum[kStages][kBlockM];
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType kv_full;
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType qdo_full[kStages];
    alignas(8) cutlass::arch::ClusterBarrier::ValueType qdo_empty[kStages];
    // Packed calls: a box that ends past its sequence lands here first (bwd_mainloop.h, clear_landed).
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType kv_landed;
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType qdo_landed;
    // kDqInTurn: the one dO stage's own pair (qdo_full / qdo_empty then hold Q and the rows' LSE and dsum alone).
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType do_full;
    alignas(8) cutlass::arch::ClusterBarrier::ValueType do_empty;
    // kHeadDim's P^T buffers (last, so that kKeys's members keep their offsets).
    alignas(kSplitHeadDim ? 1024 : 16) cute::array_aligned<Element, kSplitHeadDim ? cosize_v<SmemLayoutP> : 8> p;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= kMaxSmemBytes, "backward tile exceeds sm90's shared memory");
};

}  // namespace flashbuild::hopper
