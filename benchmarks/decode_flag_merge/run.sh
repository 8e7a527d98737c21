#!/usr/bin/env bash
# Issue 45, the flagged merge tail (README.md beside), one nvidia-h200 call: the two builds it needs side by side (the
# KV-cache tests' selection, decode_table.py's), the one-launch GPU tests (every merge tail, flag-merge among them,
# against the three-kernel path bit for bit and the fp32 reference), then decode_table.py with the flagged and the
# lane tails as columns beside the default, graph-replayed and eager, SDPA's flash and cuDNN beside. Carry `.whl`. From
# the repo root after the wheel line, in a checkout of 08974ab (the form's last commit; main no longer has flag-merge):
#   OUT=$OUT [BATCH=1,8] [CACHE=4096,16384,65536] [HDIM=64,128] [REPS=15] [TESTS=1] [PATHS=flag-merge,lane-merge] \
#     bash benchmarks/decode_flag_merge/run.sh
. "$(dirname "$0")/../study_start.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
python3 -m flashbuild --hdim 64,128 --dtype fp16 --arch native --direction splitkv --causal both --jobs 8 \
  > "$OUT/build-tests.log" 2>&1 &
python3 -m flashbuild --hdim 64,128 --dtype fp16 --arch native --direction splitkv --causal off --no-local --no-softcap \
  --jobs 8 > "$OUT/build-table.log" 2>&1 &
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log | cut -c1-160
if [ "${TESTS:-1}" = 1 ]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rfEs tests/gpu/test_kvcache_one_launch_gpu.py \
    > "$OUT/tests.txt" 2>&1
  echo "== tests rc $? $(at)"; tail -n 6 "$OUT/tests.txt" | cut -c1-240
fi
timeout 300 python3 benchmarks/decode/decode_table.py --hdim "${HDIM:-64,128}" --batch "${BATCH:-1,8}" \
  --cache "${CACHE:-4096,16384,65536}" --reps "${REPS:-15}" --paths "${PATHS:-flag-merge,lane-merge}" --skip-no-idx \
  --json "$OUT/table.json" > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"; tail -n 40 "$OUT/table.txt" | cut -c1-260
