#!/usr/bin/env bash
# Issue 45, the elected merge tail (README.md beside), one nvidia-h200 call: the two builds it needs side by side (the
# KV-cache tests' selection, decode_table.py's), the one-launch GPU tests (every merge tail, elected-merge among them,
# against the three-kernel path bit for bit and the fp32 reference), then decode_table.py with the elected and the
# lane tails as columns beside the default, graph-replayed and eager, SDPA's flash and cuDNN beside. Carry `.whl`. From
# the repo root of a checkout of 9cfe77a (the form's commit: main no longer has the elected-merge path) after the wheel
# line:
#   OUT=$OUT [BATCH=1,8] [CACHE=4096,16384,65536] [HDIM=64,128] [REPS=15] [TESTS=1] bash benchmarks/decode_elected_merge/run.sh
# (PATHS, decode_table.py's --paths, the tails beside the default: elected-merge,lane-merge unless set;
# ../decode_flag_merge/run.sh runs this script with its own.)
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
  --cache "${CACHE:-4096,16384,65536}" --reps "${REPS:-15}" --paths "${PATHS:-elected-merge,lane-merge}" --skip-no-idx \
  --json "$OUT/table.json" > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"; tail -n 40 "$OUT/table.txt" | cut -c1-260
