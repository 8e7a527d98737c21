// Tile shapes, shared-memory layouts, MMA types and the register split of the Hopper (sm_90a)
// forward kernel: one producer warpgroup (TMA loads) and kBlockM / 64 consumer warpgroups (wgmma).
#pragma once

#include "hopper/gmma_extra.h"
#include "hopper/sm90.h"

namespace flashbuild::hopper {

struct FwdTile {
  int block_m;  // query rows per tile: 64 per consumer warpgroup
  int block_n;  // key rows per main-loop step
  int stages;   // K and V tiles in flight (each its own ring)
  bool pingpong;  // consumer warpgroups take turns issuing their wgmmas (softmax of one under the
                  // products of the other)
};

// Shared memory of one CTA: Q, the K and V rings, and O's buffer for a TMA store (when it fits).
constexpr int fwd_smem_bytes(int head_dim, int block_m, int block_n, int stages, bool o_aliases_q) {
  return 2 * head_dim * ((o_aliases_q ? 1 : 2) * block_m + 2 * stages * block_n) + 1024;
}
constexpr bool fwd_o_aliases_q(int head_dim, int block_m, int block_n, int stages) {
  return fwd_smem_bytes(head_dim, block_m, block_n, stages, false) > kMaxSmemBytes;
}

// The tile heuristic in one place. wgmma takes M = 64 per warpgroup, and N (block_n for S = QK^T,
// head_dim for O += PV) a multiple of 8 up to 256; CuTe's selector offers 64, 96, 128, 192 and 256
// (the rest need CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED, which doubles a TU's compile time), and
// hopper/gmma_extra.h adds 80, 112 and 176. Registers per consumer thread: S holds block_n / 2 floats, P
// block_n / 4 words, O head_dim / 2 floats; with two consumer warpgroups each gets 240 registers.
// Shared memory decides the ring depth: hdim 128 fits two stages of 128-key K and V tiles beside Q
// and O (192 KB), hdim 64 four; hdim 192 and 256 have no room for an O buffer and stage O in V's
// ring (OStore below). hdim 64 takes 192-row tiles, three consumer warpgroups of 160 registers (S 64
// floats, O 32): each K/V tile then serves 1.5x the rows, 8-19 % faster from 2k than 128 rows
// (benchmarks/fwd_tile_hdim64; causal at 1k 3 % slower); hdim 32 takes the same tile, 1.32-1.46x the
// Ampere-path kernel it replaced from 4k (benchmarks/fwd_hdim32). hdim 256 takes 80-key tiles (O 128
// floats, S 40; two stages fill 225 of the 227 KB) without ping-pong: against 64-key tiles with it,
// 1.06-1.17x non-causal and 1.06-1.10x causal from 4k on an H100, causal 1k 4 % slower; ping-pong on
// was within 1.5 % of off (benchmarks/fwd_tile_hdim256). Plain hdim 192 (`plain`: no local window, no softcap)
// takes FA3's 128 x 112 (S 56 floats, P 28 words, O 96; two 112-key stages beside Q fill 217 of the 227 KB, O in
// V's ring): in turns on the H200 against 128 x 96 with ping-pong (benchmarks/fwd_short_hdim256, call 2, fp16 /
// bf16, 1k / 4k / 16k), non-causal without ping-pong 0.984 / 0.987, 1.037 / 1.044, 1.082 / 1.084x (ping-pong on:
// 0.4-1.5 % less from 4k); causal with ping-pong (and kRowLimits, fwd_mainloop.h) 0.968 / 0.963, 1.043 / 1.011,
// 1.030 / 1.024x, against 128 x 96 with kRowLimits too 0.964 / 0.963, 1.026 / 1.008, 1.022 / 1.024x (ping-pong
// off: 0.94x at 1k, 0.99-1.00x at 4k). So ping-pong causal alone; 1k gives up 1.3-3.7 % (still 1.01-1.02x cuDNN
// there). The local and softcap kernels keep 128 x 96 with ping-pong (not measured with the new tile).
// wide_keys: the tile of a kernel whose key blocks no causal mask, local window or page cuts (the plain
// non-causal variant's main kernel; fwd_params.h, kWideKeys). At hdim 128 it is 128 x 176, as
// FlashAttention-3 tiles it: S 88 floats, P 44 words, O 64; K and V rings of two 176-key stages fill
// 208 of the 227 KB, so O goes out through V's ring (kOAliasesV). A 176-key box straddles pages
// whose size is a multiple of 128 only, and 176 keys leave short sequences' last blocks part-empty:
// such calls run the variant's 128-key kernel (fwd_launch.h, run_fwd_sm90). In turns on the H200 against
// the 128-key kernel (the same SASS as the one tile before; benchmarks/fwd_tile_hdim128_176, fp16 / bf16,
// 16k tokens): 1.016 / 1.016x at 8k and 1.021 / 1.022x at 16k (638.7 / 638.0 TFLOPS), but 0.917 / 0.930x
// at 512, 0.965 / 0.950x at 1k, 0.971 / 0.974x at 2k, 0.988 / 0.987x at 4k, and 0.965-0.988x on packed
// batches of at most 1.5k and 5.5k keys a sequence: so from 8k keys (fwd_wide_keys.h). The first try, with
// O in Q's buffer and before kOverlapSoftmax, was 0.92x at 1k, 0.975x at 4k, 1.01x at 16k
// (benchmarks/fwd_tile_hdim128).
// Tuning sweeps override it for a whole build (wide_keys, plain and causal then change nothing):
//   nvcc -DFLASHBUILD_HOPPER_BLOCK_M=128 -DFLASHBUILD_HOPPER_BLOCK_N=128 -DFLASHBUILD_HOPPER_STAGES=2
//   nvcc -DFLASHBUILD_HOPPER_PINGPONG=0
constexpr FwdTile fwd_tile(int head_dim, bool wide_keys = false, bool plain = false, bool causal = false) {
#if defined(FLASHBUILD_HOPPER_BLOCK_M) && defined(FLASHBUILD_HOPPER_BLOCK_N) && defined(FLASHBUILD_HOPPER_STAGES)
  FwdTile tile{FLASHBUILD_HOPPER_BLOCK_M, FLASHBUILD_HOPPER_BLOCK_N, FLASHBUILD_HOPPER_STAGES, true};
  (void)wide_keys, (void)plain, (void)causal;
#else
  FwdTile tile = head_dim <= 64    ? FwdTile{192, 128, 4, true}
                 : head_dim <= 96  ? FwdTile{128, 128, 3, true}
                 : head_dim <= 128 ? (wide_keys ? FwdTile{128, 176, 2, true} : FwdTile{128, 128, 2, true})
                 : head_dim <= 192 ? (plain ? FwdTile{128, 112, 2, causal} : FwdTile{128, 96, 2, true})
                                   : FwdTile{128, 80, 2, false};
#endif
#ifdef FLASHBUILD_HOPPER_PINGPONG
  tile.pingpong = FLASHBUILD_HOPPER_PINGPONG != 0;
#endif
  return tile;
}

// How O leaves the CTA. kTma: through its own shared-memory buffer (stmatrix, one TMA store that
// clips rows past seqlen_q), or, when no other fits (hdim 192, 256), through the first rows of V's
// ring, which then hold the next tile's V loads back until the store has read them (the next tile's
// Q and first K go out at once: FwdTraits::kOAliasesV). kDirect: from registers to global memory (two
// elements per store, rows predicated), no shared memory and no wait; measured slower (when sO was
// sQ's buffer) (hdim 256 causal 4-9%, hdim 128 with a buffer of its own ~10%:
// benchmarks/hopper_fwd/README.md), so kAuto is kTma and kDirect is kept for sweeps.
enum class OStore : int { kAuto, kTma, kDirect };

// Named barriers of the kernel (ids after CUTLASS's reserved ones; the hardware has 16).
enum class FwdBarrier : int {
  kWarpgroupTurn0 = 0,  // ping-pong: consumer warpgroup i waits on kWarpgroupTurn0 + i (up to 3)
  kQueryEmpty = 4,      // consumers are done with sQ: Q may be reloaded
  kOutputEmpty = 5,     // sO may be written (the last tile's store has read it)
  kOutputFull = 6,      // sO is written: the TMA store may read it
  kSplitArrived = 7,    // split-KV, fused combine: the tile's partials are stored (FwdEpilogue::combine_if_last)
};
constexpr int kMaxConsumerWarpgroups = 3;

CUTE_DEVICE void barrier_sync(FwdBarrier id, int threads) {
  cutlass::arch::NamedBarrier::sync(threads, static_cast<int>(id));
}
CUTE_DEVICE void barrier_arrive(FwdBarrier id, int threads) {
  cutlass::arch::NamedBarrier::arrive(threads, static_cast<int>(id));
}
CUTE_DEVICE FwdBarrier warpgroup_turn(int warpgroup) {
  return static_cast<FwdBarrier>(static_cast<int>(FwdBarrier::kWarpgroupTurn0) + warpgroup);
}

// The wgmma of S = Q K^T for one warpgroup's 64 rows: N = block_n. An 80-key tile (hdim 256), a 112-key
// one (hdim 192, plain) and a 176-key one (hdim 128, wide_keys) take our own atoms (hopper/gmma_extra.h: CuTe's need a define that
// doubles the TU's compile time); any other block_n CuTe's selector, which picks N = block_n for the
// standard shapes.
template <class Element, int kBlockN, int kHeadDim>
CUTE_HOST_DEVICE constexpr auto qk_mma_op() {
  return ss_mma_op<Element, kBlockN, kHeadDim>();
}

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, bool kPingpong_, class Element_,
          OStore kOStore_ = OStore::kAuto, int kCtasPerSm_ = 1>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // CTAs resident on one SM (__launch_bounds__' minimum, the persistent grid's size): 1, or 2 for the split-KV
  // kernel (common/splitkv_heuristic.h, kHopperSplitKVCtasPerSm), each with half the registers.
  static constexpr int kCtasPerSm = kCtasPerSm_;

  static constexpr int kNumMmaWarpgroups = kBlockM / kRowsPerWarpgroup;
  static constexpr int kNumMmaThreads = kNumMmaWarpgroups * kWarpgroupThreads;
  static constexpr int kNThreads = kNumMmaThreads + kWarpgroupThreads;  // + the producer warpgroup
  static constexpr bool kPingpong = kPingpong_ && kNumMmaWarpgroups > 1;
  // The softmax of key block j under this warpgroup's own P V of block j - 1 (fwd_mainloop.h, mma):
  // the wait on that P V, O's rescale and P's conversion come at the start of the next step instead
  // of the end of this one. In one step ptxas hoisted the wait above the exponentials (the SASS of
  // the hdim-128 loop: all 64 MUFU.EX2 after WARPGROUP.DEPBAR.LE gsb0, 0x0, and at hdim 96, 192 and
  // 256 the same; FA3's at 0251105a has 13 of 64 before it), so P V and the softmax ran one after
  // the other. Same registers, same instructions. Measured in turns on the H200, non-causal
  // (benchmarks/fwd_softmax_overlap): hdim 128 1.012-1.025x (683 / 706 TFLOPS fp16 / bf16 at 16k),
  // hdim 192 1.009-1.027x (fp16); slower at hdim 96 (0.983-0.987x), 256 (0.975-0.995x) and at hdim
  // 128 causal up to 4k (0.976-0.994x); so on at hdim 128 and 192, where the mainloop takes it for
  // the non-causal kernels without a local window (FwdMainloop::kOverlapSoftmax).
  // nvcc -DFLASHBUILD_HOPPER_FWD_OVERLAP=0 (or 1) sets it for every tile of a whole build, for sweeps.
#ifdef FLASHBUILD_HOPPER_FWD_OVERLAP
  static constexpr bool kOverlapSoftmax = FLASHBUILD_HOPPER_FWD_OVERLAP != 0;
#else
  static constexpr bool kOverlapSoftmax = kNumMmaWarpgroups == 2 && (kHeadDim == 128 || kHeadDim == 192);
#endif

  static_assert(kBlockM % kRowsPerWarpgroup == 0, "block_m must be whole consumer warpgroups (64 rows each)");
  static_assert(kNumMmaWarpgroups >= 1 && kNumMmaWarpgroups <= kMaxConsumerWarpgroups,
                "the kernel has 1 to 3 consumer warpgroups (named barriers and registers)");
  static_assert(kBlockN % 16 == 0, "block_n must be a multiple of 16 (the K step of O += PV)");
  static_assert(kHeadDim % 16 == 0 && kHeadDim <= 256, "head dim must be a multiple of 16, at most 256");
  static_assert(kStages >= 2, "the K/V rings need two stages to overlap loads with products");

  // setmaxnreg: the producer gives registers back so the consumers can hold S, P and O. The
  // counts are multiples of 8 and fill at most the register file.
  static constexpr int kProducerRegs =
      kCtasPerSm == 2 ? 40 : kNumMmaWarpgroups == 1 ? 56 : kNumMmaWarpgroups == 2 ? 24 : 32;
  static constexpr int kConsumerRegs =
      kCtasPerSm == 2 ? 216 : kNumMmaWarpgroups == 1 ? 256 : kNumMmaWarpgroups == 2 ? 240 : 160;
  static_assert(kCtasPerSm == 1 || (kCtasPerSm == 2 && kNumMmaWarpgroups == 1),
                "two CTAs an SM: one consumer warpgroup");
  static_assert((kProducerRegs * kWarpgroupThreads + kConsumerRegs * kNumMmaThreads) * kCtasPerSm <= kRegisterFile,
                "setmaxnreg counts overflow the register file");

  using TileShapeQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;  // S = Q K^T: (M, N, K)
  using TileShapePV = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;  // O = P V:   (M, N, K)
  // Consumer warpgroups stack along M: each owns 64 query rows and reads the same K/V tile.
  using WarpgroupLayout = Layout<Shape<Int<kNumMmaWarpgroups>, _1, _1>>;
  // S = Q K^T: both operands from shared memory, K-major (head_dim contiguous).
  using TiledMmaQK = decltype(make_tiled_mma(qk_mma_op<Element, kBlockN, kHeadDim>(), WarpgroupLayout{}));
  // O += P V: P from registers (the softmax output never leaves them), V from shared memory read
  // MN-major (V's rows are keys, so head_dim, the N of this product, is the contiguous one).
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<Int<kRowsPerWarpgroup>, Int<kHeadDim>, Int<kBlockN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      WarpgroupLayout{}));

  using SmemAtom = decltype(k_major_smem_atom<Element, kHeadDim>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutO = SmemLayoutQ;
  using SmemLayoutK = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutV = SmemLayoutK;
  // The same V buffer seen as (head_dim, block_n, stages): the B operand of O += P V.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutV{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{}, Step<_2, _1, _3>{})));

  static constexpr bool kOBufferFits = !fwd_o_aliases_q(kHeadDim, kBlockM, kBlockN, kStages);
  static constexpr bool kStoreOTma = kOStore_ != OStore::kDirect;
  // With no room for an O buffer of its own, sO is the start of V's ring (SharedStorage::o), which
  // the last P V of a tile has finished reading before the epilogue writes it; the producer loads the
  // next tile's V only once the store has read sO (the o_read barrier), while the next tile's Q and
  // first K load at once. sO in sQ's buffer instead (the kernel until issue 46) held the next Q back
  // until the store had read O, so the next tile's first S waited for the stmatrix, the store's read
  // and Q's load one after the other: in turns on the H200 (fp16, without the causal pairs of
  // tile_scheduler.h), 1.002-1.045x at hdim 192 and 256, most at 1k non-causal and 4k causal
  // (benchmarks/fwd_tile_turnover).
  static constexpr bool kOAliasesV = kStoreOTma && !kOBufferFits;
  static constexpr bool kOwnOBuffer = kStoreOTma && kOBufferFits;
  static_assert(!kOAliasesV || kBlockM <= kStages * kBlockN, "sO in V's ring needs the ring to hold block_m rows");
  // When a consumer thread releases sO (FwdEpilogue::release_o): late, once the next tile's first
  // Q K^T is issued (the store thread's wait for the store's read then runs under it), or at the end
  // of the tile's epilogue. nvcc -DFLASHBUILD_HOPPER_FWD_O_RELEASE_LATE=0|1 for sweeps.
#ifdef FLASHBUILD_HOPPER_FWD_O_RELEASE_LATE
  static constexpr bool kReleaseOLate = FLASHBUILD_HOPPER_FWD_O_RELEASE_LATE != 0;
#else
  static constexpr bool kReleaseOLate = true;
#endif
  static constexpr int kQBytes = kBlockM * kHeadDim * int(sizeof(Element));
  static constexpr int kKVTileBytes = kBlockN * kHeadDim * int(sizeof(Element));  // one K or V stage

  using PipelineKV = cutlass::PipelineTmaAsync<kStages>;

  // 1024-byte alignment: the 128-byte swizzle pattern repeats every 8 rows of 128 bytes, and the
  // wgmma descriptors and TMA boxes assume each buffer starts at a pattern boundary.
  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutV>> v;
    alignas(1024) cute::array_aligned<Element, kOwnOBuffer ? cosize_v<SmemLayoutO> : 8> o_own;
    typename PipelineKV::SharedStorage pipeline_k;
    typename PipelineKV::SharedStorage pipeline_v;
    alignas(8) cutlass::arch::ClusterTransactionBarrier::ValueType q_full;
    // kOAliasesV: every consumer thread arrives once per tile when it is done with sO (the store
    // thread once the TMA store has read it); the producer waits on it before a tile's first V.
    alignas(8) cutlass::arch::ClusterBarrier::ValueType o_read;
    // K/V multicast in a cluster of two CTAs (fwd_params.h, kMulticastKV): the first CTA's, on which the second CTA's
    // producer arrives once its own consumers released a K or a V stage (FwdMainloop::load).
    alignas(8) cutlass::arch::ClusterBarrier::ValueType peer_k[kStages];
    alignas(8) cutlass::arch::ClusterBarrier::ValueType peer_v[kStages];

    CUTE_DEVICE Element* o() { return kOAliasesV ? v.data() : o_own.data(); }
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= kMaxSmemBytes, "forward tile exceeds sm90's shared memory");
  static_assert(kCtasPerSm == 1 || kCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024,
                "two CTAs' shared memory exceeds an SM's");
};

}  // namespace flashbuild::hopper
