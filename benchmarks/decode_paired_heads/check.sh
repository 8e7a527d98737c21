#!/usr/bin/env bash
# What issue 45 left on the pairs (README.md, h200-4), one nvidia-h200 call: the builds, the pairs' GPU file (bad index
# values on paired calls among its tests) and the one-launch file's FLASHBUILD_SPLITKV_PATH and pairs tests,
# sanitize.py --bad under memcheck and two shapes under racecheck, then the decode table at batch 64 (hdim 64 and 128,
# 4k and 16k, `no-pairs` beside). From the repo root after the wheel line:
#   OUT=$OUT [REPS=15] bash benchmarks/decode_paired_heads/check.sh
. "$(dirname "$0")/../study_start.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 6 > "$OUT/build-fp16.log" 2>&1 &
python3 -m flashbuild --hdim 64 --direction splitkv --dtype bf16 --arch native --causal off --no-local \
  --no-softcap --jobs 4 > "$OUT/build-bf16.log" 2>&1 &
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal both --jobs 6 \
  > "$OUT/build-one-launch.log" 2>&1 &
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_kvcache_decode_pairs_gpu.py \
  tests/gpu/test_kvcache_one_launch_gpu.py -k "decode_pairs or unknown_path or pairs" > "$OUT/tests.txt" 2>&1
echo "== tests rc $? $(at)"; tail -n 3 "$OUT/tests.txt"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  python3 benchmarks/decode_paired_heads/sanitize.py --bad > "$OUT/memcheck.txt" 2>&1
echo "== memcheck rc $? $(at)"; grep -E "ERROR SUMMARY|^b[0-9]|^  bad|no InvalidIndexError" "$OUT/memcheck.txt" | cut -c1-150
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 \
  python3 benchmarks/decode_paired_heads/sanitize.py --shapes 2 > "$OUT/racecheck.txt" 2>&1
echo "== racecheck rc $? $(at)"; grep -E "RACECHECK SUMMARY|^b[0-9]" "$OUT/racecheck.txt" | cut -c1-150
timeout 150 python3 benchmarks/decode/decode_table.py --hdim 64,128 --batch 64 --cache 4096,16384 \
  --reps "${REPS:-15}" --skip-no-idx --paths no-pairs --json "$OUT/table.json" > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"
tail -n 14 "$OUT/table.txt"
