// The TMA descriptors of a Hopper split-KV launch, kept from one call to the next (host code alone).
//
// A decoding step is one small launch, and an eager one pays its host time in full (benchmarks/decode/README.md,
// "Host time of an eager call"). FwdLoads / FwdStores::to_params (fwd_params.h) build four descriptors a launch
// through CuTe's make_tma_copy, whose driver call (cuTensorMapEncodeTiled) CUTLASS looks up again with
// cudaGetDriverEntryPointByVersion at every build. A serving loop calls with the same shapes and strides step after
// step (the same cache tensors, a q and an out of the same size), so this keeps the last few launches' descriptors,
// keyed by every value to_params reads except the four pointers, and on a hit points the kept descriptors at the
// call's tensors with cuTensorMapReplaceAddress (looked up once): the driver's own rewrite of a descriptor's global
// address, so a hit gives the descriptor a fresh build would (the kernels compared bit for bit, cached against
// fresh: tests/gpu/test_kvcache_descriptor_cache_gpu.py). A miss, or a driver without the entry point, builds them
// as before.
//
// Thread-local (no lock; a thread's launches reuse its own entries), per traits (a template static). The A/B switch
// (`FLASHBUILD_SPLITKV_PATH=fresh-descriptors`, the binding) sets splitkv_descriptor_cache_on() for the call.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "hopper/fwd_params.h"
#include "common/splitkv_descriptor_switch.h"  // splitkv_descriptor_cache_on

namespace flashbuild::hopper {

// One TMA view as to_params builds it (gmem_view's arguments): its tensor's pointer, extents and strides.
struct TmaView {
  const void* ptr;
  int64_t rows, heads, batches, row_stride, head_stride, batch_stride;
  bool same_shape(const TmaView& o) const {
    return rows == o.rows && heads == o.heads && batches == o.batches && row_stride == o.row_stride &&
           head_stride == o.head_stride && batch_stride == o.batch_stride;
  }
};

// Q, K, V, O: the views FwdLoads::to_params and FwdStores::to_params make of p (fwd_params.h). A value those read is
// a value of this key: change one there, change it here (the GPU test compares cached against fresh descriptors
// over calls that change each of them).
inline std::array<TmaView, 4> tma_views(const FwdParams& p) {
  const ViewExtents e = view_extents(p);
  return {{{p.q, e.rows_q, p.nheads, e.batches_q, p.q_row_stride, p.q_head_stride, p.q_batch_stride},
           {p.k, e.rows_k, p.nheads_k, e.batches_k, p.k_row_stride, p.k_head_stride, p.k_batch_stride},
           {p.v, e.rows_k, p.nheads_k, e.batches_k, p.v_row_stride, p.v_head_stride, p.v_batch_stride},
           {p.o, e.rows_q, p.nheads, e.batches_q, p.o_row_stride, p.o_head_stride, p.o_batch_stride}}};
}

// cuTensorMapReplaceAddress through the runtime's entry-point lookup, once a process (null: none, never cache).
using ReplaceAddressFn = CUresult (*)(CUtensorMap*, void*);
inline ReplaceAddressFn replace_address_fn() {
  static const ReplaceAddressFn fn = [] {
    void* pfn = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion("cuTensorMapReplaceAddress", &pfn, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t status = cudaGetDriverEntryPoint("cuTensorMapReplaceAddress", &pfn, cudaEnableDefault, &found);
#endif
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || pfn == nullptr) {
      (void)cudaGetLastError();
      return ReplaceAddressFn{nullptr};
    }
    return reinterpret_cast<ReplaceAddressFn>(pfn);
  }();
  return fn;
}

// Points a TMA copy's descriptor (which it owns: this is a copy of the kept one) at ptr.
template <class Tma>
bool retarget(Tma& tma, const void* ptr, ReplaceAddressFn replace) {
  auto* desc = reinterpret_cast<CUtensorMap*>(const_cast<cute::TmaDescriptor*>(tma.get_tma_descriptor()));
  return replace(desc, const_cast<void*>(ptr)) == CUDA_SUCCESS;
}

template <class Traits>
struct SplitKVDescriptors {
  typename FwdLoads<Traits>::Params loads;
  typename FwdStores<Traits>::Params stores;
};

// The descriptors of a launch with these (tma_strides'd) params: kept ones retargeted, or built.
template <class Traits>
SplitKVDescriptors<Traits> splitkv_descriptors(const FwdParams& p) {
  const ReplaceAddressFn replace = replace_address_fn();
  if (replace == nullptr || !splitkv_descriptor_cache_on().load(std::memory_order_relaxed)) {
    return {FwdLoads<Traits>::to_params(p), FwdStores<Traits>::to_params(p)};
  }
  struct Entry {
    std::array<TmaView, 4> views{};
    SplitKVDescriptors<Traits> d;
    bool valid = false;
  };
  constexpr int kEntries = 4;  // a few shapes in turn (two head dims' builds are separate traits already)
  static thread_local Entry entries[kEntries];
  static thread_local int next = 0;
  const std::array<TmaView, 4> views = tma_views(p);
  for (Entry& entry : entries) {
    if (!entry.valid) { continue; }
    bool same = true;
    for (int i = 0; i < 4 && same; ++i) { same = entry.views[i].same_shape(views[i]); }
    if (!same) { continue; }
    SplitKVDescriptors<Traits> d = entry.d;
    const bool ok = (views[0].ptr == entry.views[0].ptr || retarget(d.loads.tma_q, views[0].ptr, replace)) &&
                    (views[1].ptr == entry.views[1].ptr || retarget(d.loads.tma_k, views[1].ptr, replace)) &&
                    (views[2].ptr == entry.views[2].ptr || retarget(d.loads.tma_v, views[2].ptr, replace)) &&
                    (views[3].ptr == entry.views[3].ptr || retarget(d.stores.tma_o, views[3].ptr, replace));
    if (!ok) {  // the driver refused a pointer: build afresh (and report a real error there)
      entry.valid = false;
      break;
    }
    entry.views = views, entry.d = d;
    return d;
  }
  Entry& slot = entries[next];
  next = (next + 1) % kEntries;
  slot.valid = false;  // until both are built (make_tma_copy may throw)
  slot.d = {FwdLoads<Traits>::to_params(p), FwdStores<Traits>::to_params(p)};
  slot.views = views, slot.valid = true;
  return slot.d;
}

// What launch_fwd (fwd_launch.h) takes: the split-KV kernel's kept descriptors, the forward's built for the call.
template <class Traits, int kFeatures>
SplitKVDescriptors<Traits> launch_descriptors(const FwdParams& p) {
  if constexpr (kIsSplitKV<kFeatures>) {
    return splitkv_descriptors<Traits>(p);
  } else {
    return {FwdLoads<Traits>::to_params(p), FwdStores<Traits>::to_params(p)};
  }
}

}  // namespace flashbuild::hopper
