// run_fwd for sm90 TUs: runtime flags -> template arguments for the Hopper forward.
// The Hopper kernel (hopper/fwd_kernel.h) takes every call of head dims 32, 64, 96, 128, 192, 256 the
// binding makes: dense or packed (cu_seqlens: the TMA views are the whole packed tensors, bounded by
// total_q / total_k, and each sequence is an offset in them: SeqRange in tile_scheduler.h). A TMA box of
// keys may run past its sequence's last key: into rows the mask cuts (seqused_k), or into the next packed
// sequence's first rows; the consumers zero those V rows before P V reads them (fwd_mainloop.h,
// zero_v_rows), so whatever they hold (NaN, inf) stays out of the result.
// A paged KV cache (block_table: the binding's prefill-sized cache calls at head dims 32-128) runs here
// too: each key box is one page's rows (FwdMainloop::key_box), the page size a multiple of the key block
// (128 keys: a variant whose main kernel takes 176-key tiles runs paged calls on its 128-key kernel, run_fwd_sm90).
// What the kernel cannot take is an error, not another kernel: tensors whose pointers or strides are not
// multiples of 16 bytes (TMA's rule; the binding copies such tensors into aligned ones,
// binding/flash_api.cpp: vector_aligned) and calls with no keys (the binding answers those itself: out 0,
// LSE +inf). So only a direct C++ caller meets it, and no sm90 TU compiles an Ampere-path forward for calls
// the binding never makes (such a fallback, a TU per variant, would cost every build its compile: issue 17).
// This header includes neither the Hopper kernel (hopper/fwd_kernel.h) nor any Ampere kernel: a variant's
// TU is the launch alone, host code (the dispatch, the TMA descriptors of fwd_params.h), and reaches the
// kernel through FwdKernelEntry, which <variant>_kernel.cu compiles device-only.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/launch.h"  // check_head_dim, sm_count
#include "hopper/fwd_kv_multicast.h"  // fwd_kv_multicast: FLASHBUILD_HOPPER_FWD_KV_MULTICAST
#include "hopper/fwd_pairs.h"  // fwd_pairs: FLASHBUILD_HOPPER_FWD_PAIRS
#include "hopper/fwd_params.h"  // the descriptors and parameters; not the kernel (fwd_kernel.h)
#include "hopper/fwd_wide_keys.h"  // wide_keys_from: FLASHBUILD_HOPPER_FWD_WIDE_FROM
#include "hopper/splitkv_descriptors.h"  // launch_descriptors: the split-KV kernel's kept from call to call
#include "hopper/tma_checks.h"

namespace flashbuild {
namespace hopper {

// The Hopper forward has a tile for every kernel head dim (common/variant_space.h).
constexpr bool serves_head_dim(int head_dim) { return is_kernel_head_dim(head_dim); }

// Whether the Hopper kernel can take this call (see the top of this file).
inline bool can_run(FwdParams const& p, int head_dim, int64_t elem_bytes) {
  if (p.head_dim != head_dim || p.seqlen_k <= 0 || p.nheads_k <= 0 || p.nheads % p.nheads_k != 0) { return false; }
  // Packed tensors: both or neither (the binding passes both), with their row counts.
  if (!p.cu_seqlens_q != !p.cu_seqlens_k || (p.cu_seqlens_q && (p.total_q <= 0 || p.total_k <= 0))) { return false; }
  const ViewExtents e = view_extents(p);
  return tma_addressable(p.q, elem_bytes, {{p.q_row_stride, e.rows_q}, {p.q_head_stride, p.nheads}, {p.q_batch_stride, e.batches_q}}) &&
         tma_addressable(p.k, elem_bytes, {{p.k_row_stride, e.rows_k}, {p.k_head_stride, p.nheads_k}, {p.k_batch_stride, e.batches_k}}) &&
         tma_addressable(p.v, elem_bytes, {{p.v_row_stride, e.rows_k}, {p.v_head_stride, p.nheads_k}, {p.v_batch_stride, e.batches_k}}) &&
         tma_addressable(p.o, elem_bytes, {{p.o_row_stride, e.rows_q}, {p.o_head_stride, p.nheads}, {p.o_batch_stride, e.batches_q}});
}

// Strides over an extent of 1 made valid for TMA (tma_checks.h).
inline FwdParams tma_strides(FwdParams p) {
  const ViewExtents e = view_extents(p);
  // head_dim elements: a multiple of 16 bytes (head_dim % 16 == 0)
  auto fix = [&](int64_t& stride, int extent) { stride = unit_extent_stride(stride, extent, p.head_dim); };
  fix(p.q_head_stride, p.nheads), fix(p.o_head_stride, p.nheads);
  fix(p.k_head_stride, p.nheads_k), fix(p.v_head_stride, p.nheads_k);
  fix(p.q_batch_stride, e.batches_q), fix(p.o_batch_stride, e.batches_q);
  fix(p.k_batch_stride, e.batches_k), fix(p.v_batch_stride, e.batches_k);
  fix(p.q_row_stride, e.rows_q), fix(p.o_row_stride, e.rows_q);
  fix(p.k_row_stride, e.rows_k), fix(p.v_row_stride, e.rows_k);
  return p;
}

// One launch of the Hopper forward kernel with these traits (tuning sweeps call it directly, with
// fwd_kernel.h included: FwdKernelEntry, fwd_params.h).
template <class Traits, bool kIsCausal, int kFeatures>
void launch_fwd(const FwdParams& params, cudaStream_t stream) {
  using KernelParams = FwdKernelParams<Traits, kIsCausal, kFeatures>;
  const FwdParams tma_params = tma_strides(params);
  // Pairs need tiles whose lengths grow evenly with the block: a dense causal call's, not a local window's or a
  // packed batch's (the split-KV kernel has its own scheduler).
  const bool pairs = kIsCausal && !(kFeatures & kLocal) && !kIsSplitKV<kFeatures> && !params.cu_seqlens_q;
  const FwdPairs setting = pairs ? fwd_pairs() : FwdPairs{0, 1, 1};
  const int64_t m_blocks = (int64_t(params.seqlen_q) + Traits::kBlockM - 1) / Traits::kBlockM;
  // The grid's slots: one CTA an SM, two for the split-KV kernel's two-CTA traits (Traits::kCtasPerSm).
  const int slots = sm_count() * Traits::kCtasPerSm;
  check_tile_count(kIsSplitKV<kFeatures> ? "the Hopper split-KV" : "the Hopper forward",
                   m_blocks, params.nheads, params.batch,
                   kIsSplitKV<kFeatures> ? params.num_splits : 1, slots);
  const auto descriptors = launch_descriptors<Traits, kFeatures>(tma_params);
  KernelParams kp{params, descriptors.loads, descriptors.stores,
                  KernelParams::Scheduler::make({params.seqlen_q, Traits::kBlockM, params.nheads, params.batch,
                                                 params.num_splits, slots, setting.max_blocks,
                                                 setting.tail(m_blocks)})};
  dim3 grid(kp.scheduler.grid_size(slots));
  // K/V multicast (fwd_params.h, kMulticastKV) in clusters of two CTAs: the non-causal deal gives CTAs 2c and 2c + 1
  // query blocks of one (batch, head) in every round when a head's query blocks are even and the grid is (the tile
  // count then is too, so both CTAs take as many tiles). Dense and unpaged calls: a packed batch's tiles may have no
  // rows (one CTA of a pair would skip a tile the other runs), and a paged cache is read a box a page. The grid is
  // persistent, so it must be resident at once: at most the clusters the device holds together.
  const KernelHandle& kernel = FwdKernelEntry<Traits, kIsCausal, kFeatures>::get();
  int cluster = 1;
  if constexpr (kMulticastKV<Traits, kIsCausal, kFeatures>) {
    if (fwd_kv_multicast() && m_blocks % 2 == 0 && !params.cu_seqlens_q && !params.block_table) {
      const int resident = 2 * kernel.max_active_clusters(Traits::kNThreads, Traits::kSmemBytes, 2);
      const unsigned even = std::min(grid.x, unsigned(resident)) & ~1u;
      if (even >= 2) { grid.x = even, cluster = 2; }
    }
  }
  // The split-KV kernel may be a programmatic dependent launch (hopper/splitkv_dependent_launch.h).
  const bool programmatic = kIsSplitKV<kFeatures> && params.dependent_launch != DependentLaunch::kNone;
  kernel.launch(grid, Traits::kNThreads, Traits::kSmemBytes, stream, kp, programmatic, cluster);
}

// A variant with wide tiles (kWideKeys: the plain non-causal hdim-128 forward) has two kernels: the wide one, and
// a 128-key one (kKeys128Kernel, its own TU) for a paged cache (a 176-key box would straddle pages, whose size is
// a multiple of 128) and for keys too short for the wide tiles to pay (wide_keys_from).
template <int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd_sm90(const FwdParams& params, cudaStream_t stream) {
  if constexpr (kWideKeys<kHeadDim, kIsCausal, kFeatures>) {
    if (params.block_table || params.seqlen_k < wide_keys_from()) {
      constexpr int kKeys128 = kFeatures | kKeys128Kernel;
      using Keys128 = VariantTraits<kHeadDim, kDType, kIsCausal, kKeys128>;
      static_assert(Keys128::kBlockN == fwd_tile(kHeadDim).block_n, "the 128-key kernel takes the head dim's tile");
      launch_fwd<Keys128, kIsCausal, kKeys128>(params, stream);
      return;
    }
  }
  launch_fwd<VariantTraits<kHeadDim, kDType, kIsCausal, kFeatures>, kIsCausal, kFeatures>(params, stream);
}

}  // namespace hopper

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd(const FwdParams& params, cudaStream_t stream) {
  static_assert(kArch >= 90 && hopper::serves_head_dim(kHeadDim), "an sm90 forward TU of a head dim with a Hopper tile");
  check_head_dim("run_fwd", kHeadDim, params.head_dim);
  if (params.seqlen_q == 0 || params.batch == 0 || params.nheads == 0) { return; }
  using Element = typename hopper::ElementOf<kDType>::type;
  // A paged cache (the binding's prefill chunks, head dims 32-128): a key box must not straddle two pages. The
  // kernel that takes it: the variant's, or with wide tiles its 128-key one (run_fwd_sm90).
  constexpr int kPagedBlockN = hopper::kWideKeys<kHeadDim, kIsCausal, kFeatures>
                                   ? hopper::fwd_tile(kHeadDim).block_n
                                   : hopper::VariantTraits<kHeadDim, kDType, kIsCausal, kFeatures>::kBlockN;
  if (params.block_table && params.page_size % kPagedBlockN != 0) {
    throw std::runtime_error("flashbuild: the Hopper forward takes a paged KV cache whose page size is a multiple of " +
                             std::to_string(kPagedBlockN) + " rows (got " +
                             std::to_string(params.page_size) + "); flash_attn_with_kvcache checks this before");
  }
  if (!hopper::can_run(params, kHeadDim, sizeof(Element))) {
    throw std::runtime_error("flashbuild: the Hopper forward cannot take this call: it needs keys (seqlen_k > 0) and "
                             "q, k, v, out whose pointers and strides are multiples of 16 bytes; the Python API copies "
                             "misaligned tensors and answers calls without keys itself, so call run_fwd the way it does "
                             "(kernels/binding/flash_api.cpp)");
  }
  hopper::run_fwd_sm90<kHeadDim, kDType, kIsCausal, kFeatures>(params, stream);
}

}  // namespace flashbuild
