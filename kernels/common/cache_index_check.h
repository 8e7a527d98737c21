// The first kernel of a KV-cache call (run_splitkv, both families): checks the caller's index tensors
// (params.index_check, common/params.h) and writes them clamped into their ranges to index_check.checked,
// where the binding has pointed seqused_k, cache_batch_idx, cache_leftpad and block_table. Every kernel
// after it (the append, the attention, the Hopper forward on a paged cache) reads only the checked copy,
// so a bad value cannot make one address memory outside the cache; the bad value itself is reported to
// the device's record (common/index_errors.h), which the binding raises as a named Python error.
// One CTA per batch row; a few hundred bytes per row: this kernel is a launch, not a cost.
#pragma once

#include "common/index_errors.h"
#include "common/launch.h"
#include "common/params.h"  // CacheIndexCheck

namespace flashbuild {

constexpr int kIndexCheckThreads = 128;

template <class Params>
__global__ void __launch_bounds__(kIndexCheckThreads) cache_index_check_kernel(const __grid_constant__ Params p) {
  const CacheIndexCheck& c = p.index_check;
  const int batch = blockIdx.x;
  const int rows = c.num_cache_rows;
  int* const seqlens = c.checked;
  int* const batch_idx = c.checked + p.batch;
  int* const leftpad = c.checked + 2 * p.batch;
  int* const table = c.checked + 3 * p.batch;
  // Every thread needs the row's length (the block table's columns in use); a load each, no barrier.
  const int cached = c.seqlens ? c.seqlens[batch] : c.capacity - p.seqlen_knew;
  const int used = cached < 0 ? 0 : (cached > c.capacity - p.seqlen_knew ? c.capacity - p.seqlen_knew : cached);
  if (threadIdx.x == 0) {
    if (c.seqlens) {
      seqlens[batch] = checked_index(cached, c.capacity - p.seqlen_knew, c.error, IndexArg::kCacheSeqlens, 0, batch);
    }
    if (c.batch_idx) {
      batch_idx[batch] = checked_index(c.batch_idx[batch], rows - 1, c.error, IndexArg::kCacheBatchIdx, 0, batch);
    }
    if (c.leftpad) {
      leftpad[batch] = checked_index(c.leftpad[batch], c.capacity, c.error, IndexArg::kCacheLeftpad, 0, batch);
    }
  }
  if (c.block_table == nullptr) { return; }
  // The pages this row's keys (cached and appended) fill are checked; the rest of its row of the table
  // (serving stacks leave -1 or stale pages there) is clamped alone: the kernels' tiles never reach them.
  const int keys = used + p.seqlen_knew;
  const int used_pages = (keys + p.page_size - 1) / p.page_size;
  const int* src = c.block_table + int64_t(batch) * c.block_table_batch_stride;
  int* dst = table + int64_t(batch) * c.max_pages;
  for (int col = threadIdx.x; col < c.max_pages; col += kIndexCheckThreads) {
    const int page = src[col];
    if (col < used_pages) {
      dst[col] = checked_index(page, rows - 1, c.error, IndexArg::kBlockTable, col, batch);
    } else {
      dst[col] = page >= 0 && page < rows ? page : 0;
    }
  }
}

// Launches the check over every batch row when the call has an index tensor to check.
template <class Params>
void run_cache_index_check(const Params& params, cudaStream_t stream) {
  if (params.index_check.checked == nullptr || params.batch == 0) { return; }
  launch(&cache_index_check_kernel<Params>, dim3(unsigned(params.batch)), kIndexCheckThreads, 0, stream, params);
}

}  // namespace flashbuild
