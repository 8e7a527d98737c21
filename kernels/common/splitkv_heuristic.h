// How many key splits a decoding call gets. Header-only and torch-free: the binding sizes the
// partial-result buffers with it, the launcher trusts the count it is given.
#pragma once

namespace flashbuild {

constexpr int kMaxSplits = 128;
constexpr int kSplitKVBlockM = 64;

// Keys per main-loop step of the split-KV kernel (its tile, see ampere/splitkv_launch.h).
constexpr int splitkv_block_n(int head_dim) { return head_dim <= 128 ? 128 : 64; }

// The head dims whose sm90 split-KV is the Hopper kernel (hopper/splitkv_launch.h: its boxes of hopper_splitkv_block_n
// keys, 64 or 128, divide every page size the binding accepts there); above, the Ampere path's (flashbuild/selection/variants.py, HEAD_DIM_FAMILY).
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

// The Hopper split-KV (sm90, head dims 32-128: hopper/splitkv_launch.h) ran one persistent CTA per SM (two since:
// choose_num_splits_hopper below calls this rule with its block and SM counts), each walking its tiles one after the
// other: a second wave of tiles runs behind the first rather than beside it. So split until the tiles fill one wave of
// the SMs, not two CTAs per SM, keeping four key blocks per split as above. On the H200, kernel time
// (benchmarks/decode/README.md, "The Hopper split-KV"): batch 1 with 64k keys took 33 splits by the rule above and ran
// 1.04-1.09x the Ampere-path kernel's time; one wave is 16. With the combine fused into the kernel (one launch), a
// forced sweep of 4-32 splits found this count the best or within 1.4 us of it (the same count timed twice) at batch 1
// and 8 (benchmarks/decode/README.md, "One launch for a decoding call"). Its splits keep two key blocks, not four: with
// the lane merge tail, batch 1 with 4k keys ran 16 splits of 2 blocks in 0.87-0.88x (hdim 64) and 0.94-0.95x (hdim 128)
// the time of 8 splits of 4, graph-replayed, in two runs; 32 of 1 ran 1.2-1.3x (README.md, "Small calls").
constexpr int kOneWaveMinBlocksPerSplit = 2;
inline int choose_num_splits_one_wave(int batch, int nheads, int seqlen_q, int seqlen_k, int block_m, int block_n,
                                      int num_sms, int min_blocks = kOneWaveMinBlocksPerSplit) {
  const int m_blocks = (seqlen_q + block_m - 1) / block_m;
  const int ctas = batch * nheads * m_blocks;
  if (ctas <= 0 || ctas >= num_sms) return 1;
  return clamp_num_splits(num_sms / ctas, (seqlen_k + block_n - 1) / block_n, min_blocks);
}

// The Hopper split-KV's CTA (hopper/fwd_params.h, SplitKVTraits): two are resident on one SM, each with two stages
// of K/V boxes of hopper_splitkv_block_n keys (64 above head dim 64, where 128-key boxes would not leave room for a
// second CTA), 128 registers a thread at launch (the consumer warpgroup takes 216 with setmaxnreg). So two CTAs'
// latency chains (the wait for K, QK, softmax, PV, the partial, the merge) overlap on one SM, as cuDNN's small
// decode CTAs do. Main's one CTA an SM (three or four stages of 128-key boxes, 145-230 KB of shared memory, the whole
// register file) ran its chain alone. On the H200, graph-replayed, two runs, the same split counts: the two-CTA
// kernel took 0.89-0.98x main's time at batch 1 with hdim 128, 0.95-1.02x in the other rows of issue 45's table but
// one, hdim 64 at batch 1 with 4k keys (1.05-1.07x; 0.95-0.97x with 32 splits: choose_num_splits_hopper below)
// (benchmarks/decode/README.md, "Two CTAs per SM").
constexpr int kHopperSplitKVCtasPerSm = 2;
constexpr int hopper_splitkv_block_n(int head_dim) { return head_dim > 64 ? 64 : 128; }

// Its split count: one CTA an SM's worth of splits (choose_num_splits_one_wave over the SMs, each split keeping 256
// keys at least, as main's rule), and two CTAs an SM's worth where a split would then read at most 64 KB of keys and
// values (splits of 128 keys at least). In two runs' forced sweeps (README.md, "Two CTAs per SM"), doubling paid
// where a split was that short (head dim 64, batch 1, 4k keys: 8.7-8.9 us against 9.5-9.9 with 16 splits) and was
// even or worse elsewhere (hdim 128 at batch 1 with 4k keys: 10.2 and 11.9 against 10.3 and 10.6; hdim 64 at batch 8
// with 16k-64k keys 2-3 % slower). fp16 and bf16: two bytes an element. On the decode tile (run 15, README.md, "The
// split count and the K/V heads' order"), forced 2-32 splits at batch 1 and 8 and 1-2 at batch 64 (issue 45's rows)
// beat this count by no more than the count forced against itself (0.986-1.020x); 4 at batch 8 ran 1.000-1.007x.
constexpr int kTwoCtaSplitMaxBytes = 64 * 1024;
inline int choose_num_splits_hopper(int batch, int nheads, int seqlen_q, int seqlen_k, int head_dim, int num_sms) {
  const int block_n = hopper_splitkv_block_n(head_dim);
  const int one = choose_num_splits_one_wave(batch, nheads, seqlen_q, seqlen_k, kSplitKVBlockM, block_n, num_sms,
                                             256 / block_n);
  const long long split_bytes = (long long)((seqlen_k + one - 1) / one) * head_dim * 2 * 2;
  if (split_bytes > kTwoCtaSplitMaxBytes) return one;
  return choose_num_splits_one_wave(batch, nheads, seqlen_q, seqlen_k, kSplitKVBlockM, block_n,
                                    num_sms * kHopperSplitKVCtasPerSm, 128 / block_n);
}

}  // namespace flashbuild
