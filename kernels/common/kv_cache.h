// Where a decoding call's keys live (run_splitkv; the fields are described in common/params.h): a
// contiguous cache, whose batch rows may be picked by cache_batch_idx and start after cache_leftpad
// padding rows, or a paged one, whose positions map to pages through a block table. The split-KV
// kernel reads K/V tiles through it, the append kernel writes new keys and values through it.
#pragma once

#include <cstdint>

#include <cute/config.hpp>  // CUTE_DEVICE

namespace flashbuild {

// A cache position resolved to memory: the page (or, contiguous, the cache's batch row) and the row in it.
struct CacheSlot {
  int block;
  int row;

  CUTE_DEVICE int64_t offset(int64_t batch_stride, int64_t row_stride) const {
    return int64_t(block) * batch_stride + int64_t(row) * row_stride;
  }
};

// The cache of one batch row of q.
struct CacheRow {
  const int* pages = nullptr;  // this row's block table, or null for a contiguous cache
  int page_size = 0;
  int cache_row = 0;           // contiguous: the cache's batch row (cache_batch_idx)
  int leftpad = 0;             // contiguous: padding rows before the first key

  CacheRow() = default;
  template <class Params>
  CUTE_DEVICE CacheRow(Params const& p, int batch)
      : pages(p.block_table ? p.block_table + batch * p.block_table_batch_stride : nullptr),
        page_size(p.page_size),
        cache_row(p.cache_batch_idx ? p.cache_batch_idx[batch] : batch),
        leftpad(p.cache_leftpad ? p.cache_leftpad[batch] : 0) {}

  // Cache position `pos` (leftpad rows included). A paged lookup is a global load: callers issue
  // it well before they need the address.
  CUTE_DEVICE CacheSlot slot(int pos) const {
    if (pages) return {pages[pos / page_size], pos % page_size};
    return {cache_row, pos};
  }
  // Key `key` of the ones this row attends to (the first sits after the leftpad rows).
  CUTE_DEVICE CacheSlot key_slot(int key) const { return slot(leftpad + key); }
};

// The number of keys batch row `batch` attends to: its cache length, plus the appended keys, minus
// its leftpad rows (negative means none).
template <class Params>
CUTE_DEVICE int decode_seqlen_k(Params const& p, int batch) {
  const int cached = p.seqused_k ? p.seqused_k[batch] : p.seqlen_k;
  return cached + p.seqlen_knew - (p.cache_leftpad ? p.cache_leftpad[batch] : 0);
}

}  // namespace flashbuild
