#!/usr/bin/env bash
# The fused split merge's two tails on the GPU host, one call (issue 45 item 3): build the selections the
# one-launch tests and the table load, the one-launch tests (both tails bit for bit against the previous path),
# then the decode table at batch 1 and 8 with 4k and 16k keys, hdim 64 and 128, eager and graph-replayed, SDPA
# flash and cuDNN beside, and the one-launch path's default tail (serial-merge) against lane-merge and the
# previous three-kernel path, in the same process. Each step bounded by timeout; logs under $OUT; a short table
# last. Run from the repo root.
set -u
OUT=${OUT:-merge-tail-out}
mkdir -p "$OUT"
start=$(date +%s)
since() { echo "$(( $(date +%s) - start ))s"; }
common="--hdim 64,128 --direction splitkv --dtype fp16 --arch native"
timeout 85 python3 -m flashbuild $common --causal both --jobs 10 > "$OUT/build-tests.log" 2>&1 &
timeout 85 python3 -m flashbuild $common --causal off --no-local --no-softcap --jobs 6 > "$OUT/build-bench.log" 2>&1 &
wait
echo "builds done at $(since)"
for f in "$OUT"/build-*.log; do echo "$f: $(tail -n 1 "$f")"; done
timeout 60 python3 -m pytest -x -q -p no:cacheprovider tests/gpu/test_kvcache_one_launch_gpu.py \
  > "$OUT/one-launch-tests.log" 2>&1
echo "one-launch tests rc=$? at $(since)"
timeout 75 python3 benchmarks/decode/decode_table.py --batch 1,8 --cache 4096,16384 --reps 15 \
  --paths previous,lane-merge --skip-no-idx --json "$OUT/decode_table.json" > "$OUT/decode_table.txt" 2>&1
echo "decode table rc=$? at $(since)"
echo "== one-launch tests"; grep -E "^(FAILED|ERROR)|passed|failed|error" "$OUT/one-launch-tests.log" | tail -n 6
grep -A4 -E "^E  " "$OUT/one-launch-tests.log" | head -n 16
tail -n 12 "$OUT/decode_table.txt"
