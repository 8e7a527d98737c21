// The Hopper split-KV's decode tile (splitkv_decode_traits.h says why and what): its consumer warpgroup's main
// loop, its epilogue and the kernel composing them with the split-KV kernel's producer (FwdMainloop::load), as
// fwd_kernel.h composes the 64-row tile's. One consumer warpgroup, keys in wgmma's M:
//   per key block, in the order the producer loads them (the sequence's last first): its S^T = K Q^T is issued
//     (both operands in shared memory), then the previous block's O^T += V^T P^T behind it; once S^T is in, while
//     that P V runs: the scores' transform and mask, each query column's max (thread, warp by shuffles, warpgroup
//     through `exchange` and a named barrier), exp2 against it, each thread's share of the column sums, P^T into
//     the sP buffer the running P V does not read; then the wait for that P V, O^T's columns rescaled, and the
//     barrier that publishes P^T to the next step's P V (the last block's P V after the loop).
//   the column sums are reduced once at the end (shuffles, the same exchange), O^T normalised, and O and the LSE
//   leave from registers: a split's fp32 partial (and the merge: FwdEpilogue::combine_if_last), or O itself.
// Zeros and masks as the 64-row tile's (fwd_mainloop.h): V rows a box loads past the keys are cleared before the
// first P V reads them; K rows there give scores the mask sets to -inf.
#pragma once

#include "common/timeline.h"  // a study build's CTA timeline; nothing without its define
#include "hopper/fwd_kernel.h"  // FwdKernel::sequence, FwdMainloop (the producer), FwdEpilogue (the merge)
#include "hopper/splitkv_cluster_merge.h"  // the cluster merge's hand-over (SplitMerge::kCluster)
#include "hopper/splitkv_decode_traits.h"

namespace flashbuild::hopper {

template <class Base, bool kIsCausal, int kFeatures, int kRowsQ>
struct DecodeTile {
  using Traits = DecodeTileTraits<Base, kRowsQ>;
  using Element = typename Traits::Element;
  using Producer = FwdMainloop<Base, kIsCausal, kFeatures>;
  using Epilogue = FwdEpilogue<Base, kIsCausal>;
  using PipelineKV = typename Traits::PipelineKV;
  using PipelineState = typename PipelineKV::PipelineState;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kThreads = Traits::kNumMmaThreads;
  static constexpr int kWarps = kThreads / cutlass::NumThreadsPerWarp;
  static constexpr int kCols = kRowsQ / 4;  // query columns a thread holds: 2 of each 8-column group
  // The tile's query rows in sQ: its first kRowsQ, or the last with causal's bottom-aligned 64-row query block
  // (SeqRange::bottom_aligned: a call's rows are the block's last seqlen_q <= kRowsQ).
  static constexpr int kRowBlock = kIsCausal ? kSplitKVBlockM / kRowsQ - 1 : 0;
  static constexpr int kRow0 = kRowBlock * kRowsQ;
  // The column exchange's barrier: one of the ping-pong turns', which a one-warpgroup kernel never takes.
  static constexpr FwdBarrier kExchange = FwdBarrier::kWarpgroupTurn0;
  // Two K/V heads a CTA (kPairedHeads, splitkv_decode_traits.h): the head-dim-128 tile over a head-dim-64 call.
  static constexpr bool kPaired = kIsPaired<kFeatures>;
  static constexpr int kPairedHalf = kHeadDim / 2;  // the call's head dim
  static_assert(!kPaired || (kHeadDim == 128 && !kIsCausal && (kFeatures & kAllFeatures) == 0),
                "the paired tile is the plain non-causal head-dim-128 tile");

  CUTE_DEVICE static void exchange_sync() { barrier_sync(kExchange, kThreads); }

  // This thread's release of a K or V stage, on this CTA's barrier. PipelineKV::consumer_release, built for a cluster
  // of one CTA (Shape<_1, _1, _1>), arrives on the barrier of the cluster's CTA 0 (through mapa): in a launch as
  // clusters (the cluster merge) another CTA's.
  CUTE_DEVICE static void release(typename PipelineKV::SharedStorage& pipe, PipelineState const& state) {
    pipe.empty_barrier_[state.index()].arrive();
  }

  // A thread's column slot c (its two columns of each 8-column group) -> the accumulator's value coordinates.
  CUTE_DEVICE static auto value(int c, int v1, int m) { return make_coord(make_coord(c % 2, v1, c / 2), m, _0{}); }

  // This thread's per-column values reduced over the warpgroup: each thread's, the warp's (lanes with the same
  // lane % 4 hold the same columns), then the warps' through `exchange`. Both barriers: the writes of this
  // exchange must wait for every read of the last one.
  template <class Op>
  CUTE_DEVICE static void reduce_columns(float (&x)[kCols], SharedStorage& storage, int thread_idx, Op op) {
    const int lane = thread_idx % cutlass::NumThreadsPerWarp, warp = thread_idx / cutlass::NumThreadsPerWarp;
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      CUTE_UNROLL
      for (int offset = 4; offset < cutlass::NumThreadsPerWarp; offset *= 2) {
        x[c] = op(x[c], __shfl_xor_sync(0xffffffff, x[c], offset));
      }
    }
    if (lane < 4) {
      CUTE_UNROLL
      for (int c = 0; c < kCols; c += 2) {  // columns 8 * (c / 2) + 2 * lane and the next: one float2
        *reinterpret_cast<float2*>(&storage.exchange[warp][8 * (c / 2) + 2 * lane]) = make_float2(x[c], x[c + 1]);
      }
    }
    exchange_sync();
    CUTE_UNROLL
    for (int c = 0; c < kCols; c += 2) {
      float2 r = *reinterpret_cast<float2 const*>(&storage.exchange[0][8 * (c / 2) + 2 * (lane % 4)]);
      CUTE_UNROLL
      for (int w = 1; w < kWarps; ++w) {
        const float2 o = *reinterpret_cast<float2 const*>(&storage.exchange[w][8 * (c / 2) + 2 * (lane % 4)]);
        r.x = op(r.x, o.x), r.y = op(r.y, o.y);
      }
      x[c] = r.x, x[c + 1] = r.y;
    }
  }

  // The tile's O^T (unnormalised) and its column statistics; `mma` fills them, `finalize` normalises.
  struct State {
    float col_max[kCols];  // raw scores; -inf while a column has seen no key
    float col_sum[kCols];  // this thread's share
  };

  // kPairedHeads: the tile's rows of sQ made block-diagonal, from q itself (the producer's Q box, which loaded two
  // query rows side by side into each of sQ's first rows, is overwritten): row r (a query head of the pair's first
  // K/V head when r < rows / 2, of its second otherwise) holds its 64 values in its head's half of the 128 columns
  // and zeros in the other; rows past the call's hold zeros. One 16-byte vector a thread (8 columns: a swizzle atom
  // keeps them contiguous), then the writes fenced for wgmma's async proxy and the warpgroup's barrier.
  CUTE_DEVICE static void pair_rows(FwdParams const& p, SharedStorage& storage, TileCoord tile, SeqRange const& seq,
                                    int thread_idx) {
    constexpr int kVector = 16 / int(sizeof(Element));
    constexpr int kVectorsRow = kHeadDim / kVector;
    Tensor sQ = make_tensor(make_smem_ptr(storage.q.data()), typename Traits::SmemLayoutQ{});
    const int rows_head = seq.seqlen_q / 2;
    Element const* q = static_cast<Element const*>(p.q) + int64_t(seq.q_batch) * p.q_batch_stride +
                       int64_t(seq.q_row0) * p.q_row_stride + int64_t(tile.head) * p.q_head_stride;
    CUTE_UNROLL
    for (int i = thread_idx; i < kRowsQ * kVectorsRow; i += kThreads) {
      const int row = i / kVectorsRow, col = i % kVectorsRow * kVector;
      const int half = col / kPairedHalf;
      const int view_row = tile.m_block * kSplitKVBlockM + kRow0 + row;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (view_row < seq.seqlen_q && half == int(view_row >= rows_head)) {
        value = *reinterpret_cast<uint4 const*>(q + int64_t(view_row) * p.q_row_stride + (col - half * kPairedHalf));
      }
      const uint32_t at = cute::cast_smem_ptr_to_uint(&sQ(kRow0 + row, col));
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(value.x), "r"(value.y), "r"(value.z),
                   "r"(value.w));
    }
    cutlass::arch::fence_view_async_shared();
    exchange_sync();
  }

  // One consumer tile: the main loop, then normalisation and the stores. q_done runs once every S^T is issued
  // and waited on (sQ may be reloaded).
  template <class QDone>
  CUTE_DEVICE static void tile(FwdParams const& p, SharedStorage& storage, PipelineKV& pipe_k, PipelineKV& pipe_v,
                               PipelineState& read_k, PipelineState& read_v, uint32_t& q_phase, TileCoord tile,
                               SeqRange const& seq, int num_m_blocks, int thread_idx,
                               ScoreScale<kFeatures> const& score, QDone&& q_done, uint32_t& merge_phase,
                               Timeline& timeline) {
    typename Traits::TiledMmaSt mma_st;
    typename Traits::TiledMmaOt mma_ot;
    auto thr_st = mma_st.get_thread_slice(thread_idx);
    auto thr_ot = mma_ot.get_thread_slice(thread_idx);

    Tensor sQ = make_tensor(make_smem_ptr(storage.q.data()), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(storage.k.data()), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(storage.v.data()), typename Traits::SmemLayoutVt{});
    Tensor sP = make_tensor(make_smem_ptr(storage.p.data()), typename Traits::SmemLayoutP{});
    Tensor sPt = make_tensor(make_smem_ptr(storage.p.data()), typename Traits::SmemLayoutPt{});
    Tensor sQrows = local_tile(sQ, Shape<Int<kRowsQ>, Int<kHeadDim>>{}, make_coord(Int<kRowBlock>{}, _0{}));

    Tensor tStK = thr_st.partition_fragment_A(sK);      // (MMA, MMA_M, MMA_K, stage)
    Tensor tStQ = thr_st.partition_fragment_B(sQrows);  // (MMA, MMA_N, MMA_K)
    Tensor tOtV = thr_ot.partition_fragment_A(sVt);     // (MMA, MMA_M, MMA_K, stage)
    Tensor tOtP = thr_ot.partition_fragment_B(sP);      // (MMA, MMA_N, MMA_K, buffer)
    Tensor tPsP = thr_st.partition_C(sPt);              // S^T's values' places in sP: (MMA, MMA_M, MMA_N, buffer)
    Tensor tSt = partition_fragment_C(mma_st, select<0, 1>(typename Traits::TileShapeSt{}));
    Tensor tOt = partition_fragment_C(mma_ot, select<0, 1>(typename Traits::TileShapeOt{}));
    Tensor cSt = thr_st.partition_C(make_identity_tensor(select<0, 1>(typename Traits::TileShapeSt{})));
    constexpr int kMS = decltype(size<1>(tSt))::value;  // 64-key groups of a block
    constexpr int kMO = decltype(size<1>(tOt))::value;  // 64-row groups of the head dim
    static_assert(decltype(size<0, 2>(tSt))::value * 2 == kCols && decltype(size<2>(tSt))::value == 1, "N in one wgmma");

    const typename Producer::Keys k = Producer::keys(p, seq, tile);
    const int v_rows_valid = seq.seqlen_k - (k.n_block_max - 1) * kBlockN;
    const bool zero_v = v_rows_valid < kBlockN;
    const float scale_log2 = score.scale_log2;

    State st;
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) { st.col_max[c] = -INFINITY, st.col_sum[c] = 0.f; }
    clear(tOt);
    cutlass::arch::ClusterTransactionBarrier::wait(&storage.q_full, q_phase);
    q_phase ^= 1;
    if constexpr (kPaired) { pair_rows(p, storage, tile, seq, thread_idx); }

    // S^T of block n_block (in tSt) -> P^T in sP's buffer `buf`; col_scale: what O^T's columns are multiplied by.
    auto softmax = [&](int n_block, int buf, float (&col_scale)[kCols]) {
      score.transform(tSt);
      if (k.mask.needs_mask(tile.m_block, n_block, kSplitKVBlockM, kBlockN)) {
        CUTE_UNROLL
        for (int i = 0; i < size(tSt); ++i) {
          const int key = n_block * kBlockN + get<0>(cSt(i));
          const int row = tile.m_block * kSplitKVBlockM + kRow0 + get<1>(cSt(i));
          bool masked = key >= k.mask.seqlen_k;
          if constexpr (decltype(k.mask)::kHasRightEdge) { masked |= key > k.mask.last_key(row); }
          if constexpr (kHasLocal<kFeatures>) { masked |= key < k.mask.first_key(row); }
          if (masked) { tSt(i) = -INFINITY; }
        }
      }
      float m[kCols];
      CUTE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        m[c] = st.col_max[c];
        CUTE_UNROLL
        for (int i = 0; i < kMS; ++i) {
          m[c] = fmaxf(m[c], fmaxf(tSt(value(c, 0, i)), tSt(value(c, 1, i))));
        }
      }
      reduce_columns(m, storage, thread_idx, [](float a, float b) { return fmaxf(a, b); });
      CUTE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        // As OnlineSoftmax (fwd_softmax.h): exponents against 0 while a column has seen no key; the old max's
        // weight exp2(-inf) = 0 then.
        const float old_scaled = st.col_max[c] * scale_log2;
        st.col_max[c] = m[c];
        const float new_scaled = m[c] == -INFINITY ? 0.f : m[c] * scale_log2;
        col_scale[c] = exp2_ftz(old_scaled - new_scaled);
        float sum = 0.f;
        CUTE_UNROLL
        for (int i = 0; i < kMS; ++i) {
          CUTE_UNROLL
          for (int v1 = 0; v1 < 2; ++v1) {
            float& s = tSt(value(c, v1, i));
            s = exp2_ftz(fmaf(s, scale_log2, -new_scaled));
            sum += s;
          }
        }
        st.col_sum[c] = fmaf(st.col_sum[c], col_scale[c], sum);
      }
      // P^T: a thread's two adjacent columns of a key are adjacent in sP (MN-major): one 32-bit store.
      cutlass::NumericArrayConverter<Element, float, 2> convert;
      CUTE_UNROLL
      for (int i = 0; i < kMS; ++i) {
        CUTE_UNROLL
        for (int v1 = 0; v1 < 2; ++v1) {
          CUTE_UNROLL
          for (int c = 0; c < kCols; c += 2) {
            cutlass::Array<float, 2> pair;
            pair[0] = tSt(value(c, v1, i)), pair[1] = tSt(value(c + 1, v1, i));
            const cutlass::Array<Element, 2> word = convert(pair);
            // st.shared, not the generic store the swizzled pointer's dereference compiles to
            const uint32_t at = cute::cast_smem_ptr_to_uint(&tPsP(make_coord(0, v1, c / 2), i, 0, buf));
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(reinterpret_cast<uint32_t const&>(word)));
          }
        }
      }
    };
    auto rescale = [&](float const (&col_scale)[kCols]) {
      CUTE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        CUTE_UNROLL
        for (int i = 0; i < kMO; ++i) {
          tOt(value(c, 0, i)) *= col_scale[c];
          tOt(value(c, 1, i)) *= col_scale[c];
        }
      }
    };
    // sP's writes (generic proxy) before wgmma's reads (async proxy), every warp's before the product.
    auto publish_p = [&] {
      cutlass::arch::fence_view_async_shared();
      exchange_sync();
    };

    if (k.n_block_max > k.n_block_min) {
      float col_scale[kCols];
      int n_block = k.n_block_max - 1;
      int buf = 0;
      pipe_k.consumer_wait(read_k);
      timeline.first_stage(tile.batch, tile.head, tile.split, tile.splits);
      wgmma<0, false>(mma_st, tStK(_, _, _, read_k.index()), tStQ, tSt, true);
      release(storage.pipeline_k, read_k);
      ++read_k;
      softmax(n_block, buf, col_scale);  // O^T is 0: nothing to rescale
      if (zero_v) {  // before the barrier that publishes P: every warp's zeros precede the first P V
        pipe_v.consumer_wait(read_v);
        Producer::zero_v_rows(storage, read_v.index(), v_rows_valid, thread_idx);
      }
      publish_p();
      CUTE_NO_UNROLL
      for (--n_block; n_block >= k.n_block_min; --n_block) {
        pipe_k.consumer_wait(read_k);
        wgmma<-1, false>(mma_st, tStK(_, _, _, read_k.index()), tStQ, tSt, true);
        pipe_v.consumer_wait(read_v);
        wgmma<-1, false>(mma_ot, tOtV(_, _, _, read_v.index()), tOtP(_, _, _, buf), tOt, false);
        warpgroup_wait<1>();  // S^T is ready; the last block's P V may still run
        warpgroup_fence_operand(tSt);
        release(storage.pipeline_k, read_k);
        ++read_k;
        buf ^= 1;
        softmax(n_block, buf, col_scale);
        warpgroup_wait<0>();  // that P V is done: O^T may be rescaled (and its sP buffer is free)
        warpgroup_fence_operand(tOt);
        release(storage.pipeline_v, read_v);
        ++read_v;
        rescale(col_scale);
        publish_p();
      }
      q_done();  // every S^T of this tile is computed
      pipe_v.consumer_wait(read_v);
      wgmma<0, false>(mma_ot, tOtV(_, _, _, read_v.index()), tOtP(_, _, _, buf), tOt, false);
      timeline.last_block();
      release(storage.pipeline_v, read_v);
      ++read_v;
    } else {  // no key visible: O = 0, LSE = +inf
      q_done();
    }

    // Column sums over the warpgroup, O^T normalised, each column's LSE (natural-log units).
    reduce_columns(st.col_sum, storage, thread_idx, [](float a, float b) { return a + b; });
    float lse[kCols];
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const bool empty = st.col_sum[c] == 0.f;
      const float inv = empty ? 0.f : 1.f / st.col_sum[c];
      lse[c] = empty ? INFINITY : st.col_max[c] * score.scale + __logf(st.col_sum[c]);
      CUTE_UNROLL
      for (int i = 0; i < kMO; ++i) {
        tOt(value(c, 0, i)) *= inv;
        tOt(value(c, 1, i)) *= inv;
      }
    }
    // The exchange's reads of the sums before any later write of it (the next tile's first max).
    exchange_sync();
    if constexpr (kIsSplitKV<kFeatures>) { dependent_launch_tile_done(p.dependent_launch); }
    timeline.record(kTimelineStore);
    store(p, storage, tile, seq, num_m_blocks, thread_idx, tOt, lse, merge_phase, timeline);
  }

  // The cluster merge's slot s, value v of this thread (DecodeTileTraits::merge: [slot][value][thread]).
  CUTE_DEVICE static float* merge_slot(SharedStorage& storage, int slot, int v, int thread_idx) {
    return storage.merge.data() + (slot * Traits::kMergeValues + v) * kThreads + thread_idx;
  }

  // The cluster merge (SplitMerge::kCluster, splitkv_cluster_merge.h), a split after the first: once split 0 has
  // read this CTA's last hand-over, this thread's O^T values (column by column, as store walks them) then its
  // columns' LSEs (-inf for a split that saw no key, as lse_accum holds them) into its slot of split 0's shared
  // memory. phase: the parity of merge_empty's phase to wait for, flipped.
  template <class FragO>
  CUTE_DEVICE static void send_to_first(SharedStorage& storage, int split, int thread_idx, FragO const& tOt,
                                        float const (&lse)[kCols], uint32_t& phase) {
    constexpr int kMO = decltype(size<1>(tOt))::value;
    cluster_wait_acquire(&storage.merge_empty, phase ^ 1);  // a fresh barrier's parity 1 counts as done
    phase ^= 1;
    int v = 0;
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      CUTE_UNROLL
      for (int i = 0; i < kMO; ++i) {
        CUTE_UNROLL
        for (int v1 = 0; v1 < 2; ++v1, ++v) {
          cluster_send(merge_slot(storage, split - 1, v, thread_idx), tOt(value(c, v1, i)), &storage.merge_full, 0);
        }
      }
    }
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c, ++v) {
      cluster_send(merge_slot(storage, split - 1, v, thread_idx), lse[c] == INFINITY ? -INFINITY : lse[c],
                   &storage.merge_full, 0);
    }
  }

  // The cluster merge in split 0's CTA: the other splits' slots awaited, read, released to their senders, and merged
  // into this thread's O^T values and LSEs in combine_row's arithmetic and order (split 0 first), so that O and the
  // LSE come out as the merge through L2 would write them. phase: merge_full's parity to wait for, flipped.
  template <class FragO>
  CUTE_DEVICE static void merge_in_first(SharedStorage& storage, int splits, int thread_idx, FragO& tOt,
                                         float (&lse)[kCols], uint32_t& phase) {
    constexpr int kMO = decltype(size<1>(tOt))::value;
    constexpr int kSlots = Traits::kMergeSlots;
    constexpr int kValues = Traits::kMergeValues;
    if (thread_idx == 0) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&storage.merge_full,
                                                                     uint32_t((splits - 1) * Traits::kMergeSlotBytes));
    }
    cutlass::arch::ClusterTransactionBarrier::wait(&storage.merge_full, phase);
    phase ^= 1;
    float got[kSlots][kValues];
    CUTE_UNROLL
    for (int s = 0; s < kSlots; ++s) {
      CUTE_UNROLL
      for (int v = 0; v < kValues; ++v) { got[s][v] = s + 1 < splits ? *merge_slot(storage, s, v, thread_idx) : 0.f; }
    }
    // Every lane's reads are done: each warp releases the senders' slots (merge_empty counts the warps).
    __syncwarp();
    if (thread_idx % cutlass::NumThreadsPerWarp == 0) {
      for (int s = 1; s < splits; ++s) { cluster_arrive_release(&storage.merge_empty, s); }
    }
    constexpr int kLse = kValues - kCols;  // the first LSE's value index
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const float l0 = lse[c] == INFINITY ? -INFINITY : lse[c];
      float lse_max = l0;
      CUTE_UNROLL
      for (int s = 0; s < kSlots; ++s) {
        if (s + 1 < splits) { lse_max = fmaxf(lse_max, got[s][kLse + c]); }
      }
      float sum = 0.f;
      if (lse_max != -INFINITY) {
        sum += __expf(l0 - lse_max);
        CUTE_UNROLL
        for (int s = 0; s < kSlots; ++s) {
          if (s + 1 < splits) { sum += __expf(got[s][kLse + c] - lse_max); }
        }
      }
      const float total = sum == 0.f ? INFINITY : lse_max + __logf(sum);  // +inf: the row saw no key
      float weight[kSlots + 1];
      weight[0] = __expf(l0 - total);
      CUTE_UNROLL
      for (int s = 0; s < kSlots; ++s) { weight[s + 1] = __expf(got[s][kLse + c] - total); }
      int v = c * kMO * 2;
      CUTE_UNROLL
      for (int i = 0; i < kMO; ++i) {
        CUTE_UNROLL
        for (int v1 = 0; v1 < 2; ++v1, ++v) {
          float& o = tOt(value(c, v1, i));
          float out = 0.f;
          if (sum != 0.f) {
            out += weight[0] * o;
            CUTE_UNROLL
            for (int s = 0; s < kSlots; ++s) {
              if (s + 1 < splits) { out += weight[s + 1] * got[s][v]; }
            }
          }
          o = out;
        }
      }
      lse[c] = total;
    }
  }

  // O and the LSE from registers: a split's fp32 partial and the merge (as the 64-row tile's store_split and
  // combine_if_last), or with one split O in the element type and the LSE. A thread's column c, head-dim rows
  // lane / 4 + {0, 8} of its warp's 16 in each 64: lanes of a column write 8 consecutive values.
  // With the cluster merge (the launch clustered the call's splits, p.split_merge == kCluster) a split after the
  // first hands its values to split 0's CTA, which merges them and stores O and the LSE as one split would.
  template <class FragO>
  CUTE_DEVICE static void store(FwdParams const& p, SharedStorage& storage, TileCoord tile, SeqRange const& seq,
                                int num_m_blocks, int thread_idx, FragO& tOt, float (&lse)[kCols],
                                uint32_t& merge_phase, Timeline& timeline) {
    typename Traits::TiledMmaOt mma_ot;
    Tensor cOt = mma_ot.get_thread_slice(thread_idx).partition_C(
        make_identity_tensor(select<0, 1>(typename Traits::TileShapeOt{})));
    constexpr int kMO = decltype(size<1>(tOt))::value;
    const int skip = kIsCausal ? seq.q_skip : 0;  // the bottom-aligned view's rows before the sequence
    const bool lse_thread = thread_idx < 4;       // lanes 0-3 of warp 0: head-dim row 0 of their columns
    bool split = tile.splits > 1;  // the tile's slices (SplitTileScheduler: num_splits)
    if (split && p.split_merge == SplitMerge::kCluster) {
      if (tile.split != 0) {
        send_to_first(storage, tile.split, thread_idx, tOt, lse, merge_phase);
        timeline.merged(false);
        return;
      }
      merge_in_first(storage, tile.splits, thread_idx, tOt, lse, merge_phase);
      timeline.merged(true);
      split = false;
    }
    const int64_t slice = ((int64_t(tile.split) * p.batch + tile.batch) * p.nheads + tile.head) * p.seqlen_q;
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const int row = tile.m_block * kSplitKVBlockM + kRow0 + get<1>(cOt(value(c, 0, 0)));  // of the view
      if (row >= seq.seqlen_q || row < skip) { continue; }
      if (split) {
        if constexpr (kPaired) {  // a paired call has one split (launch_decode_pairs): no partials
          __trap();
        }
        const int64_t at = slice + row - skip;
        float* o = p.o_accum + at * kHeadDim;
        CUTE_UNROLL
        for (int i = 0; i < kMO; ++i) {
          CUTE_UNROLL
          for (int v1 = 0; v1 < 2; ++v1) { o[get<0>(cOt(value(c, v1, i)))] = tOt(value(c, v1, i)); }
        }
        if (lse_thread) { p.lse_accum[at] = lse[c] == INFINITY ? -INFINITY : lse[c]; }
      } else {
        Element* o = Epilogue::sequence_o(p, tile, seq) + int64_t(row) * p.o_row_stride;
        if constexpr (kPaired) {  // the row's head's 64 rows of O^T (head-dim group i of 64: the pair's head i)
          static_assert(kMO == 2, "two 64-row groups of the head dim: one a head of the pair");
          const int half = int(row - skip >= seq.seqlen_q / 2);
          CUTE_UNROLL
          for (int i = 0; i < kMO; ++i) {
            if (i != half) { continue; }
            CUTE_UNROLL
            for (int v1 = 0; v1 < 2; ++v1) {
              o[get<0>(cOt(value(c, v1, i))) - i * kPairedHalf] = Element(tOt(value(c, v1, i)));
            }
          }
        } else {
          CUTE_UNROLL
          for (int i = 0; i < kMO; ++i) {
            CUTE_UNROLL
            for (int v1 = 0; v1 < 2; ++v1) { o[get<0>(cOt(value(c, v1, i)))] = Element(tOt(value(c, v1, i))); }
          }
        }
        if (lse_thread) {
          p.lse[int64_t(seq.q_batch) * p.lse_batch_stride + seq.q_row0 + int64_t(tile.head) * p.lse_head_stride + row] =
              lse[c];
        }
      }
    }
    if (split && p.split_counters) {
      timeline.merged(Epilogue::combine_if_last(p, tile, seq, num_m_blocks, thread_idx));
    }
  }
};

// The kernel: FwdKernel's (fwd_kernel.h) producer and set-up, the decode tile's consumer.
template <class Base, bool kIsCausal, int kFeatures, int kRowsQ>
__global__ void __launch_bounds__(Base::kNThreads, Base::kCtasPerSm)
    splitkv_decode_kernel(CUTE_GRID_CONSTANT typename FwdKernel<Base, kIsCausal, kFeatures>::Params const params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Kernel = FwdKernel<Base, kIsCausal, kFeatures>;
  using Tile = DecodeTile<Base, kIsCausal, kFeatures, kRowsQ>;
  using Producer = typename Tile::Producer;
  using PipelineKV = typename Tile::PipelineKV;
  constexpr int kNumMmaThreads = Tile::kThreads;
  static_assert(kIsSplitKV<kFeatures>, "the decode tile is the split-KV kernel's");

  // The recorder: the consumer warpgroup's first thread (a study build's, common/timeline.h; else empty).
  Timeline timeline(timeline_buffer(params), kWarpgroupThreads);
  extern __shared__ char smem_raw[];
  auto& storage = *reinterpret_cast<typename Tile::SharedStorage*>(smem_raw);
  FwdParams const& p = params.fwd;

  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const int warpgroup = cutlass::canonical_warp_group_idx();  // 0: producer, 1: consumer
  // The cluster merge: the launch made the call's splits one cluster (splitkv_decode_launch.h), else it is not asked.
  const bool cluster_merge = p.split_merge == SplitMerge::kCluster && p.num_splits > 1;
  if (warp_idx == 0 && cute::elect_one_sync()) {
    Producer::prefetch_descriptors(params.mainloop);
    cutlass::arch::ClusterTransactionBarrier::init(&storage.q_full, 1);
    if (cluster_merge) {
      cutlass::arch::ClusterTransactionBarrier::init(&storage.merge_full, 1);  // split 0's arrive_and_expect_tx
      cutlass::arch::ClusterBarrier::init(&storage.merge_empty, kNumMmaThreads / cutlass::NumThreadsPerWarp);
      cutlass::arch::fence_barrier_init();  // visible to the cluster's other CTAs, which arrive on them
    }
  }
  typename PipelineKV::Params pipe_params;
  pipe_params.transaction_bytes = Base::kKVTileBytes;
  pipe_params.role = warpgroup == 0 ? PipelineKV::ThreadCategory::Producer : PipelineKV::ThreadCategory::Consumer;
  pipe_params.is_leader = threadIdx.x == 0;
  pipe_params.num_consumers = kNumMmaThreads;
  PipelineKV pipe_k(storage.pipeline_k, pipe_params, Shape<_1, _1, _1>{});
  PipelineKV pipe_v(storage.pipeline_v, pipe_params, Shape<_1, _1, _1>{});
  __syncthreads();
  if (cluster_merge) {  // every CTA's merge barriers initialised before another's first st.async or arrival
    cute::cluster_arrive();
    cute::cluster_wait();
  }
  dependent_launch_start(p.dependent_launch);  // nothing global before this (splitkv_dependent_launch.h)
  timeline.waited();

  const typename Kernel::Scheduler& scheduler = params.scheduler;
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Base::kProducerRegs>();
    if (warp_idx == 0) {
      const bool leader = threadIdx.x == 0;
      auto produce = [&](auto paged) {
        auto write = cutlass::make_producer_start_state<PipelineKV>();
        bool first = true;
        uint32_t o_phase = 0;
        for (int t = scheduler.first_tile(); scheduler.valid(t); t = scheduler.next_tile(t)) {
          const TileCoord tile = scheduler.decode(t);
          const SeqRange seq = Kernel::sequence(p, tile.batch);
          if (!seq.has_rows(tile.m_block, Base::kBlockM)) { continue; }
          Producer::template load<decltype(paged)::value>(params.mainloop, p, storage, pipe_k, pipe_v, write, tile, seq,
                                                          first, leader, o_phase);
          first = false;
        }
        if (!first) { barrier_sync(FwdBarrier::kQueryEmpty, kNumMmaThreads + cutlass::NumThreadsPerWarp); }
      };
      if (p.block_table) {
        produce(cute::true_type{});
      } else {
        produce(cute::false_type{});
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Base::kConsumerRegs>();
    const int thread_idx = int(threadIdx.x) - kWarpgroupThreads;
    const ScoreScale<kFeatures> score(p);
    typename PipelineKV::PipelineState read_k, read_v;
    uint32_t q_phase = 0;
    uint32_t merge_phase = 0;  // the cluster merge's barrier parity (split 0: merge_full's, the others: merge_empty's)
    for (int t = scheduler.first_tile(); scheduler.valid(t); t = scheduler.next_tile(t)) {
      const TileCoord tile = scheduler.decode(t);
      const SeqRange seq = Kernel::sequence(p, tile.batch);
      if (!seq.has_rows(tile.m_block, Base::kBlockM)) { continue; }
      Tile::tile(p, storage, pipe_k, pipe_v, read_k, read_v, q_phase, tile, seq, scheduler.num_m_blocks, thread_idx,
                 score, [] { barrier_arrive(FwdBarrier::kQueryEmpty, kNumMmaThreads + cutlass::NumThreadsPerWarp); },
                 merge_phase, timeline);
    }
    // A sender stays until split 0 has read its last hand-over: split 0 arrives on this CTA's barrier after that.
    // (Every CTA of a cluster walks the same rows: SplitTileScheduler deals split = blockIdx.x % num_splits.)
    if (cluster_merge && int(blockIdx.x) % p.num_splits != 0) {
      cluster_wait_acquire(&storage.merge_empty, merge_phase ^ 1);
    }
    timeline.end();
  }
#else
  __trap();  // built for another target: this kernel needs sm_90a's wgmma, TMA and setmaxnreg
#endif
}

template <class Base, bool kIsCausal, int kFeatures, int kRowsQ>
const KernelHandle& DecodeTileEntry<Base, kIsCausal, kFeatures, kRowsQ>::get() {
  static const KernelHandle kernel = KernelHandle::of(&splitkv_decode_kernel<Base, kIsCausal, kFeatures, kRowsQ>);
  return kernel;
}

}  // namespace flashbuild::hopper
