#!/usr/bin/env bash
# Issue 46: the causal hdim-128 Hopper forward on 128 x 176 tiles (README.md beside), and the 176-key line at 6k keys
# (../fwd_tile_hdim128_176/, h200-2) checked. One nvidia-h200 call, carry `.whl`, from the repo root after the wheel line:
#   OUT=$OUT bash benchmarks/fwd_causal_176/run.sh
# 1. ../fwd_tile_hdim128_176/ab.py at lengths just past the new line, whose last 176-key block is most empty
#    (6161: 36 blocks for 35.01; 7041: 41 for 40.01), then tests/gpu/test_fwd_wide_keys_gpu.py on that build.
# 2. ../fwd_sass_fa3/ab.py, arms new (the tree) and c176 (every kernel on 128 x 176 tiles: fwd_tile's sweep
#    override), causal rows at 1k, 4k, 8k, 16k, fp16 and bf16, in turns with SDPA cuDNN.
. "$(dirname "$0")/../study_start.sh"
python3 benchmarks/fwd_tile_hdim128_176/ab.py --out "$OUT/line" --seqlens 6161,7041 --varlen "" --rounds 5 --reps 20 \
  --jobs 16 > "$OUT/line.txt" 2>&1
echo "== line rc $? $(at)"; tail -n 5 "$OUT/line.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfEs tests/gpu/test_fwd_wide_keys_gpu.py > "$OUT/tests.txt" 2>&1
echo "== tests rc $? $(at)"; tail -n 4 "$OUT/tests.txt" | cut -c1-240
python3 benchmarks/fwd_sass_fa3/ab.py --out "$OUT/c176" --arms new,c176 --causal on --seqlens 1024,4096,8192,16384 \
  --rounds 5 --reps 20 --budget 240 --jobs 16 > "$OUT/c176.txt" 2>&1
echo "== c176 rc $? $(at)"; grep -E "^fwd_|budget|differ" "$OUT/c176.txt"
