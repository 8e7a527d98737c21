// How many key splits a decoding call gets. Header-only and torch-free: the binding sizes the
// partial-result buffers with it, the launcher trusts the count it is given.
#pragma once

namespace flashbuild {

constexpr int kMaxSplits = 128;
constexpr int kSplitKVBlockM = 64;

// Keys per main-loop step of the split-KV kernel (its tile, see ampere/splitkv_launch.h).
constexpr int splitkv_block_n(int head_dim) { return head_dim <= 128 ? 128 : 64; }

// The head dims whose sm90 split-KV is the Hopper kernel (hopper/splitkv_launch.h: its 128-key boxes divide every
// page size the binding accepts there); above, the Ampere path's (flashbuild/selection/variants.py, HEAD_DIM_FAMILY).
constexpr bool hopper_splitkv_head_dim(int head_dim) { return head_dim <= 128; }

// The wanted split count held to at least min_blocks key blocks per split (so each split amortises its fixed
// costs) and to 1..kMaxSplits.
inline int clamp_num_splits(int wanted, int n_blocks, int min_blocks = 4) {
  const int splits = wanted < n_blocks / min_blocks ? wanted : n_blocks / min_blocks;
  return splits < 1 ? 1 : (splits > kMaxSplits ? kMaxSplits : splits);
}

// Decoding is bound by reading the cache: split the keys until about two CTAs per SM stream it,
// but keep at least four key blocks per split so each split amortises its fixed costs.
inline int choose_num_splits(int batch, int nheads, int seqlen_q, int seqlen_k, int head_dim, int num_sms) {
  const int m_blocks = (seqlen_q + kSplitKVBlockM - 1) / kSplitKVBlockM;
  const int ctas = batch * nheads * m_blocks;
  if (ctas <= 0 || ctas >= num_sms) return 1;  // an empty call has nothing to split
  const int n_blocks = (seqlen_k + splitkv_block_n(head_dim) - 1) / splitkv_block_n(head_dim);
  return clamp_num_splits((2 * num_sms + ctas - 1) / ctas, n_blocks);
}

// The Hopper split-KV (sm90, head dims 32-128: hopper/splitkv_launch.h) runs one persistent CTA per SM,
// each walking its tiles one after the other: a second wave of tiles runs behind the first rather than
// beside it. So split until the tiles fill one wave of the SMs, not two CTAs per SM, keeping four key
// blocks per split as above. On the H200, kernel time (benchmarks/decode/README.md, "The Hopper split-KV"):
// batch 1 with 64k keys took 33 splits by the rule above and ran 1.04-1.09x the Ampere-path kernel's
// time; one wave is 16. With the combine fused into the kernel (one launch), a forced sweep of 4-32 splits found
// this count the best or within 1.4 us of it (the same count timed twice) at batch 1 and 8
// (benchmarks/decode/README.md, "One launch for a decoding call"). Its splits keep two key blocks, not four: with
// the lane merge tail, batch 1 with 4k keys ran 16 splits of 2 blocks in 0.87-0.88x (hdim 64) and 0.94-0.95x
// (hdim 128) the time of 8 splits of 4, graph-replayed, in two runs; 32 of 1 ran 1.2-1.3x (README.md, "Small calls").
constexpr int kOneWaveMinBlocksPerSplit = 2;
inline int choose_num_splits_one_wave(int batch, int nheads, int seqlen_q, int seqlen_k, int block_m, int block_n,
                                      int num_sms, int min_blocks = kOneWaveMinBlocksPerSplit) {
  const int m_blocks = (seqlen_q + block_m - 1) / block_m;
  const int ctas = batch * nheads * m_blocks;
  if (ctas <= 0 || ctas >= num_sms) return 1;
  return clamp_num_splits(num_sms / ctas, (seqlen_k + block_n - 1) / block_n, min_blocks);
}

// The Hopper split-KV's CTA (hopper/fwd_params.h, SplitKVTraits): how many are resident on one SM, its key block
// and the key blocks a split keeps at least. One CTA (the default) holds 145-230 KB of shared memory and the whole
// register file: each CTA's chain (the wait for K, QK, softmax, PV, the partial, the merge) runs alone on its SM.
// With two (-DFLASHBUILD_SPLITKV_CTAS_PER_SM=2, a study build: benchmarks/decode/README.md, "Two CTAs per SM"), two
// stages of 64-key (hdim 128) or 128-key (hdim <= 96) K/V boxes, 128 registers a thread at launch, so two CTAs'
// chains overlap on one SM, as cuDNN's small decode CTAs do; a split keeps at least 128 keys then.
#ifndef FLASHBUILD_SPLITKV_CTAS_PER_SM
#define FLASHBUILD_SPLITKV_CTAS_PER_SM 1
#endif
constexpr int kHopperSplitKVCtasPerSm = FLASHBUILD_SPLITKV_CTAS_PER_SM;
static_assert(kHopperSplitKVCtasPerSm == 1 || kHopperSplitKVCtasPerSm == 2, "the Hopper split-KV runs 1 or 2 CTAs an SM");
constexpr int hopper_splitkv_block_n(int head_dim) { return kHopperSplitKVCtasPerSm == 2 && head_dim > 96 ? 64 : 128; }
constexpr int hopper_splitkv_min_blocks(int head_dim) {
  return kHopperSplitKVCtasPerSm == 2 ? 128 / hopper_splitkv_block_n(head_dim) : kOneWaveMinBlocksPerSplit;
}

}  // namespace flashbuild
