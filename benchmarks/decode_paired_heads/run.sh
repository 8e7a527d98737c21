#!/usr/bin/env bash
# One nvidia-h200 call (README.md beside): the decode tile over pairs of K/V heads at head dim 64. Builds (fp16 hdim 64
# and 128, bf16 hdim 64: the plain non-causal split-KV variants), the pairs' GPU tests, compute-sanitizer memcheck of
# paired calls, then issue 45's decode table with `no-pairs` (one K/V head a CTA) as a column beside the default, in
# turns. Results under $OUT, the short table printed last. From the repo root after the wheel line:
#   OUT=$OUT [REPS=10] [MORE_TESTS=1] bash benchmarks/decode_paired_heads/run.sh   # MORE_TESTS: the decode tile's
#   and the one-launch GPU files after the table
. "$(dirname "$0")/../study_start.sh"
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 8 > "$OUT/build-fp16.log" 2>&1 &
python3 -m flashbuild --hdim 64 --direction splitkv --dtype bf16 --arch native --causal off --no-local \
  --no-softcap --jobs 8 > "$OUT/build-bf16.log" 2>&1 &
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_kvcache_decode_pairs_gpu.py \
  > "$OUT/tests-pairs.txt" 2>&1
echo "== pairs tests rc $? $(at)"; tail -n 3 "$OUT/tests-pairs.txt"
timeout 150 compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/decode_paired_heads/sanitize.py \
  > "$OUT/memcheck.txt" 2>&1
echo "== memcheck rc $? $(at)"; grep -E "ERROR SUMMARY|^b[0-9]" "$OUT/memcheck.txt" | cut -c1-160
timeout 260 python3 benchmarks/decode/decode_table.py --reps "${REPS:-10}" --skip-no-idx --paths no-pairs \
  --json "$OUT/table.json" > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"
if [ "${MORE_TESTS:-0}" = 1 ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_kvcache_decode_tile_gpu.py \
    tests/gpu/test_kvcache_one_launch_gpu.py > "$OUT/tests-more.txt" 2>&1
  echo "== decode tile and one-launch tests rc $? $(at)"; tail -n 3 "$OUT/tests-more.txt"
fi
tail -n 22 "$OUT/table.txt"
