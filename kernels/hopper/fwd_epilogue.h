// The forward epilogue of one tile: O (normalised, in registers) leaves the CTA one of two ways
// (OStore in fwd_traits.h):
//   TMA: stmatrix into sO, then one TMA store, which drops the rows past seqlen_q by itself. sO is
//   reused by every tile: before writing it, the thread that issued the last store waits until
//   that store has read it (kOutputEmpty). When sO is the start of V's ring (Traits::kOAliasesV),
//   each consumer thread releases it once it is done with it (release_o, the store thread once the
//   store has read it), and the producer loads the next tile's V only after every release.
//   Direct: each thread stores its column pairs straight to global memory, rows outside the
//   sequence skipped: no shared memory, no barrier.
// Packed sequences (cu_seqlens_q) with the TMA choice: a tile that ends inside its sequence leaves
// through the TMA store like a dense one; in the last tile of a sequence, the rows past its end are
// the next sequence's, which a TMA store would overwrite, so the consumers copy out the rows of the
// sequence themselves (copy_rows). So does a causal call's first tile, dense or packed: it starts
// before its sequence (SeqRange::bottom_aligned).
// The LSE goes straight from registers (one lane per row of each quad).
#pragma once

#include "common/splitkv_combine.h"  // combine_row, combine_row_lanes
#include "hopper/accumulator.h"
#include "hopper/fwd_params.h"
#include "hopper/tile_scheduler.h"
#include "hopper/utils.h"

namespace flashbuild::hopper {

// bar.red.or over named barrier `id`: every one of `threads` threads arrives and learns whether any passed true.
CUTE_DEVICE bool barrier_or(FwdBarrier id, int threads, bool pred) {
  const uint32_t hw_id = uint32_t(id) + uint32_t(cutlass::arch::ReservedNamedBarriers::FirstUserBarrier);
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(uint32_t(pred)), "r"(hw_id), "r"(uint32_t(threads))
      : "memory");
  return any != 0;
}

// kBottomAligned: the causal kernel's tiles (SeqRange::bottom_aligned), whose first may start
// before its sequence; a compile-time choice, so the other kernels' code is as it was.
template <class Traits, bool kBottomAligned = false>
struct FwdEpilogue {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kNumMmaThreads = Traits::kNumMmaThreads;
  using SmemLayoutO = typename Traits::SmemLayoutO;
  using TileShapePV = typename Traits::TileShapePV;

  // The TMA descriptor of O, which the host builds (fwd_params.h).
  using Stores = FwdStores<Traits>;
  using Params = typename Stores::Params;

  CUTE_DEVICE static void prefetch_descriptors(Params const& ep) { Stores::prefetch_descriptors(ep); }

  // The thread that issues the TMA stores (and waits for them).
  CUTE_DEVICE static bool is_store_thread(int thread_idx) { return thread_idx == 0; }

  template <class Storage, class FragO>
  CUTE_DEVICE static void store(Params const& ep, FwdParams const& p, Storage& storage, TileCoord tile,
                                SeqRange const& seq, int thread_idx, FragO const& tOrO, float const (&lse)[2]) {
    Tensor rO = convert_type<Element>(tOrO);  // O in the element type
    if constexpr (Traits::kStoreOTma) {
      store_tma(ep, p, storage, tile, seq, thread_idx, rO);
    } else {
      store_direct(p, tile, seq, thread_idx, rO);
    }
    store_lse(p, tile, seq, thread_idx, lse);
  }

  // Registers -> global: a thread holds two adjacent columns per (row, 8-column group).
  template <class FragO>
  CUTE_DEVICE static void store_direct(FwdParams const& p, TileCoord tile, SeqRange const& seq, int thread_idx,
                                       FragO const& rO) {
    typename Traits::TiledMmaPV mma_pv;
    auto thr_pv = mma_pv.get_thread_slice(thread_idx);
    Element* o = sequence_o(p, tile, seq);
    Tensor mO = make_tensor(make_gmem_ptr(o), make_shape(seq.seqlen_q, Int<kHeadDim>{}), make_stride(p.o_row_stride, _1{}));
    Tensor gO = local_tile(mO, select<0, 1>(TileShapePV{}), make_coord(tile.m_block, _0{}));
    Tensor tOgO = thr_pv.partition_C(gO);
    Tensor cO = thr_pv.partition_C(make_identity_tensor(select<0, 1>(TileShapePV{})));
    Tensor rO_rc = make_tensor(rO.data(), acc_rowcol(rO.layout()));
    Tensor gO_rc = make_tensor(tOgO.data(), acc_rowcol(tOgO.layout()));
    Tensor cO_rc = make_tensor(cO.data(), acc_rowcol(cO.layout()));
    // Columns (2c, 2c + 1) of the row/col view are adjacent in registers and in memory.
    static_assert(decltype(size<1, 0>(rO_rc))::value == 2, "expects column pairs");
    const int rows_left = seq.seqlen_q - tile.m_block * kBlockM;
    const int rows_skipped = skipped_rows(tile, seq);
    CUTE_UNROLL
    for (int r = 0; r < size<0>(rO_rc); ++r) {
      const int row = get<0>(cO_rc(r, 0));
      if (row < rows_left && (!kBottomAligned || row >= rows_skipped)) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(rO_rc); c += 2) {
          *reinterpret_cast<uint32_t*>(&gO_rc(r, c)) = *reinterpret_cast<uint32_t const*>(&rO_rc(r, c));
        }
      }
    }
  }

  // The TMA stores of O's (block_m, head_dim) box from sO, rows [row0, row0 + block_m) of (head,
  // batch) of the global coordinates g: as tma_load_box (utils.h), each instruction given only the
  // address of its buffer and the coordinates of its first element.
  template <class Tma, class SmemTensor, class GmemCoords>
  CUTE_DEVICE static void store_box(Tma const& tma, SmemTensor const& smem, GmemCoords const& g, int row0, int head,
                                    int batch) {
    constexpr int kCols = Tma::NumValSrc / kBlockM;
    static_assert(kCols * kBlockM == Tma::NumValSrc && kHeadDim % kCols == 0, "expects whole rows per TMA instruction");
    using Box = Layout<Int<Tma::NumValSrc>>;
    CUTE_UNROLL
    for (int i = 0; i < kHeadDim / kCols; ++i) {
      Tensor src = make_tensor(smem.data() + smem.layout()(0, i * kCols), Box{});
      Tensor dst = make_tensor(make_inttuple_iter(g(row0, i * kCols, head, batch)), Box{});
      copy(tma, src, dst);
    }
  }

  // The tile's rows before its sequence (> 0 only in a bottom-aligned first tile).
  CUTE_DEVICE static int skipped_rows(TileCoord tile, SeqRange const& seq) {
    return kBottomAligned ? seq.q_skip - tile.m_block * kBlockM : 0;
  }

  // Row 0 of (head, sequence) of O.
  CUTE_DEVICE static Element* sequence_o(FwdParams const& p, TileCoord tile, SeqRange const& seq) {
    return static_cast<Element*>(p.o) + int64_t(seq.q_batch) * p.o_batch_stride + int64_t(seq.q_row0) * p.o_row_stride +
           int64_t(tile.head) * p.o_head_stride;
  }

  // sO's rows [first_row, rows_left) to global memory, one 16-byte vector per thread at a time (a swizzle
  // atom keeps 8 columns of 16-bit elements, 16 bytes, contiguous). Called after every consumer's
  // stmatrix and the barrier that orders them: these are plain shared-memory loads, no async proxy.
  // The addresses come from opaque(thread_idx) (utils.h): computed here, not held across the tile loop.
  template <class SmemTensor>
  CUTE_DEVICE static void copy_rows(SmemTensor const& sO, Element* o, int64_t row_stride, int first_row,
                                    int rows_left, int thread_idx_) {
    const int thread_idx = opaque(thread_idx_);
    constexpr int kVec = 16 / int(sizeof(Element));
    constexpr int kVecsPerRow = kHeadDim / kVec;
    constexpr int kSteps = kBlockM * kVecsPerRow / kNumMmaThreads;
    static_assert(kHeadDim % kVec == 0 && kSteps * kNumMmaThreads == kBlockM * kVecsPerRow,
                  "whole 16-byte vectors per row, the same number per thread");
    CUTE_UNROLL
    for (int step = 0; step < kSteps; ++step) {
      const int i = thread_idx + step * kNumMmaThreads;
      const int row = i / kVecsPerRow, col = (i % kVecsPerRow) * kVec;
      if (row < rows_left && (!kBottomAligned || row >= first_row)) {
        *reinterpret_cast<uint128_t*>(o + row * row_stride + col) = *reinterpret_cast<uint128_t const*>(&sO(row, col));
      }
    }
  }

  template <class Storage, class FragO>
  CUTE_DEVICE static void store_tma(Params const& ep, FwdParams const& p, Storage& storage, TileCoord tile,
                                    SeqRange const& seq, int thread_idx, FragO const& rO) {
    Tensor sO = make_tensor(make_smem_ptr(storage.o()), SmemLayoutO{});

    if (is_store_thread(thread_idx)) { tma_store_wait<0>(); }  // the last tile's store has read sO
    barrier_sync(FwdBarrier::kOutputEmpty, kNumMmaThreads);
    stmatrix_accumulator(stmatrix_rows<kNumMmaThreads>(sO, thread_idx), rO);  // registers -> sO
    // stmatrix writes through the generic proxy; the TMA store reads through the async proxy.
    cutlass::arch::fence_view_async_shared();
    barrier_sync(FwdBarrier::kOutputFull, kNumMmaThreads);

    const int rows_left = seq.seqlen_q - tile.m_block * kBlockM;
    const int rows_skipped = skipped_rows(tile, seq);
    // A packed tile that ends past its sequence holds rows of the next one; a bottom-aligned first
    // tile starts before its sequence (the previous one's rows, or rows before 0, where a TMA store
    // stopped the H200 with an illegal instruction): their own rows leave row by row.
    if ((p.cu_seqlens_q && rows_left < kBlockM) || (kBottomAligned && rows_skipped > 0)) {
      copy_rows(sO, sequence_o(p, tile, seq) + int64_t(tile.m_block) * kBlockM * p.o_row_stride, p.o_row_stride,
                rows_skipped, rows_left, thread_idx);
    } else if (is_store_thread(thread_idx)) {
      Tensor mO = ep.tma_o.get_tma_tensor(make_shape(p.seqlen_q, int32_t(kHeadDim), p.nheads, p.batch));
      store_box(ep.tma_o, sO, mO, seq.q_row0 + tile.m_block * kBlockM, tile.head, seq.q_batch);
      tma_store_arrive();
    }
  }

  // kOAliasesV: this thread is done with sO (written, or read by copy_rows); the store thread waits
  // until the TMA store has read it first. Once per tile and consumer thread (fwd_kernel.h decides
  // when: FwdTraits::kReleaseOLate); the producer's V loads wait for all of them (FwdMainloop::load).
  template <class Storage>
  CUTE_DEVICE static void release_o(Storage& storage, int thread_idx) {
    if constexpr (Traits::kOAliasesV) {
      if (is_store_thread(thread_idx)) { tma_store_wait<0>(); }
      cutlass::arch::ClusterBarrier::arrive(&storage.o_read);
    }
  }

  // LSE: rows of the quad's first lane.
  // LSE is (batch, nheads, seqlen_q), or (nheads, total_q) packed: rows contiguous either way.
  CUTE_DEVICE static void store_lse(FwdParams const& p, TileCoord tile, SeqRange const& seq, int thread_idx,
                                    float const (&lse)[2]) {
    typename Traits::TiledMmaPV mma_pv;
    Tensor cO = accumulator_coords<kHeadDim, Traits::kNumMmaWarpgroups>(mma_pv.get_thr_layout_vmnk().get_flat_coord(thread_idx));
    Tensor cO_rc = make_tensor(cO.data(), acc_rowcol(cO.layout()));
    static_assert(decltype(size<0>(cO_rc))::value == 2, "a consumer thread holds two rows");
    if (thread_idx % 4 == 0) {
      float* lse_ptr = p.lse + int64_t(seq.q_batch) * p.lse_batch_stride + seq.q_row0 +
                       int64_t(tile.head) * p.lse_head_stride;
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) {
        const int row = tile.m_block * kBlockM + get<0>(cO_rc(r, 0));
        if (row < seq.seqlen_q && (!kBottomAligned || row >= seq.q_skip)) { lse_ptr[row] = lse[r]; }
      }
    }
  }

  // The split-KV kernel with more than one split (fwd_kernel.h): this split's O, normalised by its own
  // sum, and its LSE, fp32 straight from the registers into o_accum and lse_accum (common/params.h), which
  // the combine kernel merges. A split that saw no key weighs nothing there: its LSE is -inf, not the +inf
  // of a row that sees no key at all. Decoding tiles are a few rows: no shared memory, no TMA.
  template <class FragO>
  CUTE_DEVICE static void store_split(FwdParams const& p, TileCoord tile, SeqRange const& seq, int thread_idx,
                                      FragO const& tOrO, float const (&lse)[2]) {
    typename Traits::TiledMmaPV mma_pv;
    Tensor cO = accumulator_coords<kHeadDim, Traits::kNumMmaWarpgroups>(mma_pv.get_thr_layout_vmnk().get_flat_coord(thread_idx));
    Tensor cO_rc = make_tensor(cO.data(), acc_rowcol(cO.layout()));
    Tensor rO_rc = make_tensor(tOrO.data(), acc_rowcol(tOrO.layout()));
    static_assert(decltype(size<0>(rO_rc))::value == 2 && decltype(size<1, 0>(rO_rc))::value == 2,
                  "a consumer thread holds two rows, in column pairs");
    const int64_t slice = ((int64_t(tile.split) * p.batch + tile.batch) * p.nheads + tile.head) * p.seqlen_q;
    const int skip = kBottomAligned ? seq.q_skip : 0;  // the view's rows before the sequence
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = tile.m_block * kBlockM + get<0>(cO_rc(r, 0));
      if (row < seq.seqlen_q && row >= skip) {
        const int64_t at = slice + row - skip;
        float* o = p.o_accum + at * kHeadDim;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(rO_rc); c += 2) {
          *reinterpret_cast<float2*>(o + get<1>(cO_rc(r, c))) = make_float2(rO_rc(r, c), rO_rc(r, c + 1));
        }
        if (thread_idx % 4 == 0) { p.lse_accum[at] = lse[r] == INFINITY ? -INFINITY : lse[r]; }
      }
    }
  }

  // The fused split combine (p.split_counters set, after store_split): the CTA whose split of this query block
  // arrives last merges the block's rows from every split's partials (one warp a row) into O and the LSE, so
  // decoding needs no combine kernel (a launch: 14-20 % of a batch-1 call's GPU time, benchmarks/decode/README.md).
  // Arrival: the consumers meet at a barrier once their partials are stored, and one thread counts the arrival;
  // atomicInc's wrap sets the counter back to 0 at the last of num_splits arrivals, so the counters are zero again
  // when the launch ends (what the next launch, or the next replay of a captured graph, needs) with no kernel to
  // clear them. Nothing waits on another CTA: a CTA that is not last goes on to its next tile.
  // Two tails, picked per launch by p.split_merge (common/params.h), the same results bit for bit:
  //   kSerial: fences around the count, combine_row (a lane walks the splits one LSE load at a time);
  //   kLanes: one acquire-release count, combine_row_lanes (LSEs one per lane, partials loaded in groups).
  // The tile's slices are tile.splits (SplitTileScheduler: the call's num_splits), its partials in those slots.
  // Returns whether this CTA merged (a study build's timeline records it: common/timeline.h).
  CUTE_DEVICE static bool combine_if_last(FwdParams const& p, TileCoord tile, SeqRange const& seq, int num_m_blocks,
                                          int thread_idx) {
    barrier_sync(FwdBarrier::kSplitArrived, kNumMmaThreads);  // every consumer's partial stores are issued
    const bool lanes = p.split_merge == SplitMerge::kLanes;
    bool last = false;
    if (thread_idx == 0) {
      unsigned* counter = p.split_counters + (int64_t(tile.batch) * p.nheads + tile.head) * num_m_blocks + tile.m_block;
      const unsigned wrap = unsigned(tile.splits - 1);
      if (lanes) {
        // Release: the barrier ordered the whole CTA's partial stores before this thread's count, and a release
        // is cumulative, so it publishes them at device scope. Acquire: the other splits' partials, released by
        // their counts, are visible to our reads after it (the barrier below hands that on to the other warps).
        // One fence before the atomic (MEMBAR.ALL.GPU) and an L1 invalidate after it, in the SASS; kSerial has a
        // sequentially consistent fence on each side. atom.inc, not cuda::atomic_ref: it has no wrapping add.
        unsigned old;
        asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(counter), "r"(wrap) : "memory");
        last = old == wrap;
      } else {
        // The fence is cumulative: it orders the stores the barrier ordered before it (the whole CTA's partials)
        // before the count, at device scope; one thread's fence, not 128. The same fence after the count orders
        // the other splits' partials (fenced before their counts) before our reads of them.
        __threadfence();
        last = atomicInc(counter, wrap) == wrap;
        if (last) { __threadfence(); }
      }
    }
    if (!barrier_or(FwdBarrier::kSplitArrived, kNumMmaThreads, last)) { return false; }
    const int skip = kBottomAligned ? seq.q_skip : 0;
    const int first = max(tile.m_block * kBlockM - skip, 0);
    const int end = min((tile.m_block + 1) * kBlockM - skip, p.seqlen_q);
    const int64_t row0 = (int64_t(tile.batch) * p.nheads + tile.head) * p.seqlen_q;
    constexpr int kWarps = kNumMmaThreads / cutlass::NumThreadsPerWarp;
    const int lane = thread_idx % cutlass::NumThreadsPerWarp;
    if (lanes) {
      // The row's addresses from the tile's coordinates: products, no division (combine_row divides its index).
      const int64_t rows = int64_t(p.batch) * p.nheads * p.seqlen_q;  // one split's rows in lse_accum
      Element* o = static_cast<Element*>(p.o) + tile.batch * p.o_batch_stride + tile.head * p.o_head_stride;
      float* lse = p.lse + tile.batch * p.lse_batch_stride + tile.head * p.lse_head_stride;
      for (int row = first + thread_idx / cutlass::NumThreadsPerWarp; row < end; row += kWarps) {
        combine_row_lanes<kHeadDim, Element>(tile.splits, p.lse_accum + row0 + row,
                                             p.o_accum + (row0 + row) * kHeadDim, rows, o + row * p.o_row_stride,
                                             lse + row, lane);
      }
    } else {
      for (int row = first + thread_idx / cutlass::NumThreadsPerWarp; row < end; row += kWarps) {
        combine_row<kHeadDim, Element>(p, row0 + row, lane, tile.splits);
      }
    }
    return true;
  }

  // Before the CTA exits: its last store must have read sO.
  CUTE_DEVICE static void drain(int thread_idx) {
    if constexpr (Traits::kStoreOTma) {
      if (is_store_thread(thread_idx)) { tma_store_wait<0>(); }
    }
  }
};

}  // namespace flashbuild::hopper
