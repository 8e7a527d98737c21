// The writes of a decoding step before its attention (run_splitkv, when params.knew is set): the new
// keys and values go into the KV cache after each row's cached ones, the keys rotated when the call
// has rotary embedding, and q is rotated into a scratch copy that the attention then reads. One warp
// per (token, head) row; the head dim is a runtime value, so one kernel per element type serves
// every head dim. A few KB of new tokens: this kernel is latency, not bandwidth.
#pragma once

#include <cstdint>

#include <cute/config.hpp>  // CUTE_DEVICE

#include "common/kv_cache.h"
#include "common/launch.h"
#include "common/params.h"

namespace flashbuild {

constexpr int kAppendRowsPerBlock = 4;  // one warp per row

// Column c of row x after the rotary embedding at the angles (cos, sin) of its position, in fp32.
// Interleaved (GPT-J) pairs columns (2i, 2i + 1), otherwise (GPT-NeoX) (i, i + rotary_dim / 2); each
// pair (a, b) becomes (a cos - b sin, b cos + a sin). Columns from rotary_dim on pass through.
template <class Element>
CUTE_DEVICE float rotary_column(const Element* x, int c, const Element* cos, const Element* sin, int rotary_dim,
                                bool interleaved) {
  if (c >= rotary_dim) return float(x[c]);
  const int half = rotary_dim / 2;
  const bool first = interleaved ? c % 2 == 0 : c < half;  // the `a` of its pair
  const int angle = interleaved ? c / 2 : (first ? c : c - half);
  const int partner = interleaved ? (first ? c + 1 : c - 1) : (first ? c + half : c - half);
  const float rotated = float(x[partner]) * float(sin[angle]);
  return float(x[c]) * float(cos[angle]) + (first ? -rotated : rotated);
}

// Writes `head_dim` columns of `src` to `dst`, rotated at `pos` when rotary is on; lane-strided.
template <class Element, class Params>
CUTE_DEVICE void write_row(Params const& p, const Element* src, Element* dst, int pos, int lane) {
  if (p.rotary_dim == 0) {
    for (int c = lane; c < p.head_dim; c += 32) { dst[c] = src[c]; }
    return;
  }
  const Element* cos = static_cast<const Element*>(p.rotary_cos) + int64_t(pos) * (p.rotary_dim / 2);
  const Element* sin = static_cast<const Element*>(p.rotary_sin) + int64_t(pos) * (p.rotary_dim / 2);
  for (int c = lane; c < p.head_dim; c += 32) {
    dst[c] = Element(rotary_column(src, c, cos, sin, p.rotary_dim, p.rotary_interleaved));
  }
}

// Rows [0, kv_rows) are (batch, new token, K/V head): K rotated, V copied. Rows [kv_rows,
// kv_rows + q_rows) are (batch, query, head) of q, rotated into q_rotated. Sources and destinations
// never overlap, so every column is computed from unmodified inputs.
template <class Element>
__global__ void __launch_bounds__(32 * kAppendRowsPerBlock) append_kv_kernel(const __grid_constant__ FwdParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kAppendRowsPerBlock + threadIdx.x / 32;
  const int64_t kv_rows = int64_t(p.batch) * p.seqlen_knew * p.nheads_k;
  if (row < kv_rows) {
    const int head = int(row % p.nheads_k);
    const int token = int(row / p.nheads_k % p.seqlen_knew);
    const int batch = int(row / (int64_t(p.nheads_k) * p.seqlen_knew));
    const int pos = p.seqused_k[batch] + token;
    const CacheSlot slot = CacheRow(p, batch).slot(pos);
    const Element* knew = static_cast<const Element*>(p.knew) + batch * p.knew_batch_stride +
                          token * p.knew_row_stride + head * p.knew_head_stride;
    const Element* vnew = static_cast<const Element*>(p.vnew) + batch * p.vnew_batch_stride +
                          token * p.vnew_row_stride + head * p.vnew_head_stride;
    // The cache is k/v of the params, written here and only here (the attention runs after).
    Element* k = const_cast<Element*>(static_cast<const Element*>(p.k)) +
                 slot.offset(p.k_batch_stride, p.k_row_stride) + head * p.k_head_stride;
    Element* v = const_cast<Element*>(static_cast<const Element*>(p.v)) +
                 slot.offset(p.v_batch_stride, p.v_row_stride) + head * p.v_head_stride;
    write_row(p, knew, k, pos, lane);
    for (int c = lane; c < p.head_dim; c += 32) { v[c] = vnew[c]; }
    return;
  }
  if (p.rotary_dim == 0) return;
  const int64_t q_row = row - kv_rows;
  if (q_row >= int64_t(p.batch) * p.rotary_q_seqlen * p.rotary_q_nheads) return;
  const int query = int(q_row / p.rotary_q_nheads % p.rotary_q_seqlen);
  const int batch = int(q_row / (int64_t(p.rotary_q_nheads) * p.rotary_q_seqlen));
  // A query past the cache's last position (more queries than new keys) takes the last one's angles: the
  // binding sizes rotary_cos/sin by the cache (seqlen_k positions), and no row of them lies past it.
  const int pos = min(p.seqused_k[batch] + (p.rotary_q_per_row ? query : 0), p.seqlen_k - 1);
  write_row(p, static_cast<const Element*>(p.q_unrotated) + q_row * p.head_dim,
            static_cast<Element*>(p.q_rotated) + q_row * p.head_dim, pos, lane);
}

// Launches the append kernel over every new K/V row and, with rotary, every row of q.
template <class Element>
void run_append_kv(const FwdParams& params, cudaStream_t stream) {
  const int64_t kv_rows = int64_t(params.batch) * params.seqlen_knew * params.nheads_k;
  const int64_t q_rows =
      params.rotary_dim > 0 ? int64_t(params.batch) * params.rotary_q_seqlen * params.rotary_q_nheads : 0;
  const int64_t blocks = (kv_rows + q_rows + kAppendRowsPerBlock - 1) / kAppendRowsPerBlock;
  if (blocks == 0) return;
  launch(&append_kv_kernel<Element>, dim3(unsigned(blocks)), 32 * kAppendRowsPerBlock, 0, stream, params);
}

}  // namespace flashbuild
