// The Ampere-path FlashAttention forward kernel (mma.sync + ldmatrix + cp.async). One CTA owns
// kBlockM query rows of one (batch, head) and walks the key blocks it may see, keeping O in
// registers. Composition only: tiles in fwd_traits.h, masking in common/mask.h, softmax in fwd_softmax.h,
// the compiled-in features (local window, softcap) in common/features.h.
#pragma once

#include "ampere/fwd_entry.h"  // FwdMode, FwdKernelEntry
#include "ampere/fwd_softmax.h"
#include "ampere/fwd_traits.h"
#include "common/block_info.h"
#include "common/features.h"  // the softcap transform and the masks, shared with the Hopper family
#include "common/kv_cache.h"

namespace flashbuild::ampere {

// One query block of one (batch, head), or of one split of it (decoding): its sequence, and where
// its rows start in Q, K, V and O. keys() says which key blocks it reads.
template <int kBlockM, int kBlockN, bool kIsCausal, FwdMode kMode, int kFeatures>
struct FwdBlock {
  int m_block;
  int head;
  int batch;
  int split;
  SeqInfo info;

  CUTE_DEVICE FwdBlock(FwdParams const& params, int m_block_, int head_, int batch_, int split_)
      : m_block(m_block_),
        head(head_),
        batch(batch_),
        split(split_),
        info(batch_, params.seqlen_q, params.seqlen_k, params.cu_seqlens_q, params.cu_seqlens_k, params.seqused_k) {
    if constexpr (kMode != FwdMode::kFull) { info.seqlen_k = decode_seqlen_k(params, batch); }
  }

  // A block past the end of a shorter sequence of a packed batch has no rows.
  CUTE_DEVICE bool has_rows() const { return m_block * kBlockM < info.seqlen_q; }
  CUTE_DEVICE int q_rows() const { return info.seqlen_q - m_block * kBlockM; }
  // Rows of key block n_block below seqlen_k.
  CUTE_DEVICE int k_rows(int n_block) const { return info.seqlen_k - n_block * kBlockN; }

  // The mask and the key blocks [n_block_min, n_block_max) this block reads.
  struct Keys {
    AttentionMask<kIsCausal, kHasLocal<kFeatures>> mask;
    int n_block_min;
    int n_block_max;
  };
  CUTE_DEVICE Keys keys(FwdParams const& params) const {
    Keys keys{make_mask<kIsCausal, kFeatures>(params, info.seqlen_q, info.seqlen_k)};
    keys.n_block_min = keys.mask.n_block_min(m_block, kBlockM, kBlockN);
    keys.n_block_max = keys.mask.n_block_max(m_block, kBlockM, kBlockN);
    if constexpr (kMode == FwdMode::kDecode) {  // split `split` of num_splits (with one split: all of them)
      const int per_split = (keys.n_block_max - keys.n_block_min + params.num_splits - 1) / params.num_splits;
      keys.n_block_min += split * per_split;
      keys.n_block_max = min(keys.n_block_max, keys.n_block_min + per_split);
    }
    return keys;
  }
  CUTE_DEVICE int head_k(FwdParams const& p) const { return head / (p.nheads / p.nheads_k); }

  // Where this block's rows start in Q and O, and its (batch, head)'s in K and V.
  CUTE_DEVICE int64_t q_offset(FwdParams const& p) const {
    return info.q_offset(p.q_batch_stride, p.q_row_stride) + head * p.q_head_stride;
  }
  CUTE_DEVICE int64_t k_offset(FwdParams const& p) const {
    return info.k_offset(p.k_batch_stride, p.k_row_stride) + head_k(p) * p.k_head_stride;
  }
  CUTE_DEVICE int64_t v_offset(FwdParams const& p) const {
    return info.k_offset(p.v_batch_stride, p.v_row_stride) + head_k(p) * p.v_head_stride;
  }
  CUTE_DEVICE int64_t o_offset(FwdParams const& p) const {
    return info.q_offset(p.o_batch_stride, p.o_row_stride) + head * p.o_head_stride;
  }
};

// One query block of one (batch, head), or of one split of it, start to end.
// kFeatures: see common/params.h. Only the decode modes pay for the KV cache's addressing (a batch
// row index, leftpad rows, a block-table lookup per key tile); kFull compiles without it.
template <class Traits, bool kIsCausal, FwdMode kMode, int kFeatures, class Block>
CUTE_DEVICE void fwd_block(FwdParams const& params, char* smem, Block const& block) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr bool kIsDecode = kMode != FwdMode::kFull;

  const int tidx = threadIdx.x;
  const int m_block = block.m_block;
  const int head = block.head;
  const int batch = block.batch;
  [[maybe_unused]] const int split = block.split;
  const SeqInfo& info = block.info;
  if (!block.has_rows()) { return; }
  const int head_k = block.head_k(params);
  const auto keys = block.keys(params);
  const auto& mask = keys.mask;
  const int n_block_min = keys.n_block_min;
  const int n_block_max = keys.n_block_max;
  const ScoreScale<kFeatures> score_scale(params);

  const int64_t q_offset = block.q_offset(params);
  const int64_t k_offset = block.k_offset(params);
  const int64_t v_offset = block.v_offset(params);
  const int64_t o_offset = block.o_offset(params);

  // Global tiles of this (batch, head).
  Tensor mQ = make_tensor(make_gmem_ptr(static_cast<const Element*>(params.q) + q_offset),
                          make_shape(info.seqlen_q, Int<kHeadDim>{}), make_stride(params.q_row_stride, _1{}));
  Tensor mK = make_tensor(make_gmem_ptr(static_cast<const Element*>(params.k) + k_offset),
                          make_shape(info.seqlen_k, Int<kHeadDim>{}), make_stride(params.k_row_stride, _1{}));
  Tensor mV = make_tensor(make_gmem_ptr(static_cast<const Element*>(params.v) + v_offset),
                          make_shape(info.seqlen_k, Int<kHeadDim>{}), make_stride(params.v_row_stride, _1{}));
  Tensor mO = make_tensor(make_gmem_ptr(static_cast<Element*>(params.o) + o_offset),
                          make_shape(info.seqlen_q, Int<kHeadDim>{}), make_stride(params.o_row_stride, _1{}));
  Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));  // (M, D)
  Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));        // (N, D, nb)
  Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));        // (N, D, nb)
  Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));  // (M, D)
  // Decoding reads each key tile from wherever the cache keeps it (a page of a paged cache, the
  // cache row of cache_batch_idx, after the leftpad rows); the tile's rows are contiguous.
  [[maybe_unused]] const CacheRow cache = kIsDecode ? CacheRow(params, batch) : CacheRow{};
  auto cache_tile = [&](const void* base, int64_t head_stride, int64_t batch_stride, int64_t row_stride,
                        CacheSlot slot) {
    const Element* first =
        static_cast<const Element*>(base) + head_k * head_stride + slot.offset(batch_stride, row_stride);
    return make_tensor(make_gmem_ptr(first), Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_stride(row_stride, _1{}));
  };

  // Shared tiles: Q, then single-buffered K and V. The output reuses Q's buffer at the end.
  Element* smem_q = reinterpret_cast<Element*>(smem);
  Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem_q + Traits::kSmemQElems), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutKV{});
  Tensor sVt = make_tensor(sV.data(), typename Traits::SmemLayoutVt{});
  Tensor sO = make_tensor(sQ.data(), typename Traits::SmemLayoutQ{});

  // Global -> shared copies and their row coordinates (for the seqlen edge).
  typename Traits::GmemTiledCopyQKV gmem_copy;
  auto gmem_thr_copy = gmem_copy.get_thread_slice(tidx);
  Tensor tQgQ = gmem_thr_copy.partition_S(gQ);
  Tensor tQsQ = gmem_thr_copy.partition_D(sQ);
  Tensor tKgK = gmem_thr_copy.partition_S(gK);
  Tensor tKsK = gmem_thr_copy.partition_D(sK);
  Tensor tVgV = gmem_thr_copy.partition_S(gV);
  Tensor tVsV = gmem_thr_copy.partition_D(sV);
  Tensor tQcQ = gmem_thr_copy.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  Tensor tKVcKV = gmem_thr_copy.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));

  // MMA fragments and shared -> register copies (ldmatrix; transposed for V).
  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(tidx);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);
  Tensor tSrK = thr_mma.partition_fragment_B(sK);
  Tensor tOrVt = thr_mma.partition_fragment_B(sVt);
  Tensor acc_o = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});

  auto smem_copy_q = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_copy_q = smem_copy_q.get_thread_slice(tidx);
  Tensor tSsQ = smem_thr_copy_q.partition_S(sQ);
  auto smem_copy_k = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_copy_k = smem_copy_k.get_thread_slice(tidx);
  Tensor tSsK = smem_thr_copy_k.partition_S(sK);
  auto smem_copy_v = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, tiled_mma);
  auto smem_thr_copy_v = smem_copy_v.get_thread_slice(tidx);
  Tensor tOsVt = smem_thr_copy_v.partition_S(sVt);

  // Each score element's (row, col) inside the tile, for masking.
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));

  constexpr int kRows = decltype(size<0>(acc_to_rowcol(acc_o.layout())))::value;
  OnlineSoftmax<kRows> softmax;
  clear(acc_o);

  // Key tile n_block of K and V as this thread's share of the copy, and where a decoding call's
  // cache keeps it (`slot`: unused by the plain forward).
  auto slot_of = [&](int n_block) {
    if constexpr (kIsDecode) {
      return cache.key_slot(n_block * kBlockN);
    } else {
      return CacheSlot{};
    }
  };
  auto k_tile = [&](int n_block, [[maybe_unused]] CacheSlot slot) {
    if constexpr (kIsDecode) {
      return gmem_thr_copy.partition_S(
          cache_tile(params.k, params.k_head_stride, params.k_batch_stride, params.k_row_stride, slot));
    } else {
      return tKgK(_, _, _, n_block);
    }
  };
  auto v_tile = [&](int n_block, [[maybe_unused]] CacheSlot slot) {
    if constexpr (kIsDecode) {
      return gmem_thr_copy.partition_S(
          cache_tile(params.v, params.v_head_stride, params.v_batch_stride, params.v_row_stride, slot));
    } else {
      return tVgV(_, _, _, n_block);
    }
  };

  const int q_rows = block.q_rows();
  // A key block below the last is whole (`whole`): its copy has no row tests. Only the last block
  // clears its padding rows (benchmarks/zero_fill/).
  auto load_kv = [&](auto const& src, auto& dst, int n_block, auto whole) {
    if constexpr (decltype(whole)::value) {
      copy(gmem_copy, src, dst);
    } else {
      copy_rows(gmem_copy, src, dst, tKVcKV, block.k_rows(n_block));
    }
  };
  auto load_k = [&](int n_block, CacheSlot slot, auto whole) { load_kv(k_tile(n_block, slot), tKsK, n_block, whole); };
  auto load_v = [&](int n_block, CacheSlot slot, auto whole) { load_kv(v_tile(n_block, slot), tVsV, n_block, whole); };

  // One step of the main loop: key block n_block, masked element-wise or not. Decoding: `slot` is
  // where the cache keeps key block n_block; the next block's lookup goes out at the start of the
  // step, long before its K is loaded.
  CacheSlot slot{};
  auto step = [&](int n_block, auto masked) {
    const CacheSlot next_slot = n_block > n_block_min ? slot_of(n_block - 1) : slot;
    Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    cp_async_wait<0>();
    __syncthreads();  // K[n_block] landed; every warp is done with V[n_block + 1]

    // V streams in while the tensor cores compute S = Q·K^T. An unmasked block does not cross
    // the seqlen_k edge, so it is whole.
    load_v(n_block, slot, std::bool_constant<!decltype(masked)::value>{});
    cp_async_fence();
    gemm_smem_smem(acc_s, tSrQ, tSrK, tSsQ, tSsK, tiled_mma, smem_copy_q, smem_copy_k, smem_thr_copy_q,
                   smem_thr_copy_k);
    score_scale.transform(acc_s);
    if constexpr (decltype(masked)::value) { mask.apply(acc_s, tScS, m_block * kBlockM, n_block * kBlockN); }

    cp_async_wait<0>();
    __syncthreads();  // V[n_block] landed; every warp is done with K[n_block]
    // The next K streams in while we do the softmax and P·V.
    if (n_block > n_block_min) {
      load_k(n_block - 1, next_slot, std::true_type{});
      cp_async_fence();
    }
    slot = next_slot;

    softmax.update(acc_s, acc_o, score_scale.scale_log2);
    Tensor rP = convert_type<Element>(acc_s);
    Tensor tOrP = make_tensor(rP.data(), acc_to_a_operand(rP.layout()));
    gemm_reg_smem(acc_o, tOrP, tOrVt, tOsVt, tiled_mma, smem_copy_v, smem_thr_copy_v);
  };

  if (n_block_max > n_block_min) {
    int n_block = n_block_max - 1;
    slot = slot_of(n_block);
    copy_rows(gmem_copy, tQgQ, tQsQ, tQcQ, q_rows);
    load_k(n_block, slot, std::false_type{});
    cp_async_fence();
    // Key blocks run from the last to the first, so only the first steps can need masking (and,
    // with a local window, the last ones). Masked and unmasked steps are separate code: with one
    // loop body that branched around the masking, the hdim-64 forward ran 8-17% slower (H200,
    // benchmarks/fwd_masked_steps/). Without a window the masked steps are peeled off the loop
    // (hdim 128 causal: 10-14% faster than a loop that picks the step per block). `step` has two
    // call sites in either form: with a third it was no longer inlined, and its captured
    // accumulators went to local memory.
    if constexpr (kHasLocal<kFeatures>) {
      for (; n_block >= n_block_min; --n_block) {
        if (mask.needs_mask(m_block, n_block, kBlockM, kBlockN)) {
          step(n_block, std::true_type{});
        } else {
          step(n_block, std::false_type{});
        }
      }
    } else {
      for (; n_block >= n_block_min && mask.needs_mask(m_block, n_block, kBlockM, kBlockN); --n_block) {
        step(n_block, std::true_type{});
      }
      for (; n_block >= n_block_min; --n_block) { step(n_block, std::false_type{}); }
    }
  }

  // Epilogue: normalise, write the LSE, then O through shared memory for 16-byte global stores.
  float lse[kRows];
  softmax.finalize(acc_o, score_scale.scale, lse);

  Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  Tensor tOcO_rows = make_tensor(tOcO.data(), acc_to_rowcol(tOcO.layout()));
  if constexpr (kIsDecode) {
    if (params.num_splits > 1) {  // chosen at run time: one kernel serves one split and several
      // Partial result of this split, straight from the accumulators (decode tiles are small).
      const int64_t slice = ((int64_t(split) * params.batch + batch) * params.nheads + head) * params.seqlen_q;
      float* o_accum = params.o_accum + (slice + m_block * kBlockM) * kHeadDim;
      Tensor o_rows = make_tensor(acc_o.data(), acc_to_rowcol(acc_o.layout()));
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int row = get<0>(tOcO_rows(r, 0));
        if (row >= q_rows) continue;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(o_rows); ++c) { o_accum[row * kHeadDim + get<1>(tOcO_rows(r, c))] = o_rows(r, c); }
        // An empty split weighs nothing in the combine: -inf, not the +inf of an empty row.
        if (get<1>(tOcO_rows(0, 0)) == 0) {
          params.lse_accum[slice + m_block * kBlockM + row] = lse[r] == INFINITY ? -INFINITY : lse[r];
        }
      }
      return;
    }
  }

  const int64_t lse_offset = info.row_stat_offset(params.lse_batch_stride, params.lse_head_stride, head);
  if (get<1>(tOcO_rows(0, 0)) == 0) {  // one thread of each quad writes the quad's rows
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int row = get<0>(tOcO_rows(r, 0));
      if (row < q_rows) { params.lse[lse_offset + m_block * kBlockM + row] = lse[r]; }
    }
  }

  Tensor rO = convert_type<Element>(acc_o);
  auto smem_copy_o = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, tiled_mma);
  auto smem_thr_copy_o = smem_copy_o.get_thread_slice(tidx);
  Tensor taccOrO = smem_thr_copy_o.retile_S(rO);
  Tensor taccOsO = smem_thr_copy_o.partition_D(sO);
  __syncthreads();  // nobody reads Q from shared memory any more
  copy(smem_copy_o, taccOrO, taccOsO);
  __syncthreads();

  store_tile(typename Traits::GmemTiledCopyO{}, tidx, sO, gO, q_rows);
}

template <class Traits, bool kIsCausal, FwdMode kMode, int kFeatures>
__global__ void __launch_bounds__(Traits::kNThreads) fwd_kernel(const __grid_constant__ FwdParams params) {
  using Block = FwdBlock<Traits::kBlockM, Traits::kBlockN, kIsCausal, kMode, kFeatures>;
  extern __shared__ char smem[];
  // Causal query blocks near the end see the most keys: launch them first to shorten the tail.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int batch = kMode == FwdMode::kDecode ? blockIdx.z / params.num_splits : blockIdx.z;
  const int split = kMode == FwdMode::kDecode ? blockIdx.z % params.num_splits : 0;
  fwd_block<Traits, kIsCausal, kMode, kFeatures>(params, smem, Block(params, m_block, blockIdx.y, batch, split));
}

// A launch reaches the kernel by its own symbol when its TU compiles it (fwd_entry.h).
template <class Traits, bool kIsCausal, FwdMode kMode, int kFeatures>
const KernelHandle& FwdKernelEntry<Traits, kIsCausal, kMode, kFeatures>::get() {
  static const KernelHandle kernel = KernelHandle::of(&fwd_kernel<Traits, kIsCausal, kMode, kFeatures>);
  return kernel;
}

}  // namespace flashbuild::ampere
