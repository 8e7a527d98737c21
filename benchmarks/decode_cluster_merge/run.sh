#!/usr/bin/env bash
# One nvidia-h200 call (README.md beside): the split-KV builds, the one-launch GPU tests with the cluster merge among
# their paths (FLASHBUILD_SPLITKV_PATH=cluster-merge against previous / lane-merge, bit for bit), then issue 45's
# decode table with the cluster merge as a column beside the default, and the decode timeline's rows with it. Results
# under $OUT, the short table printed last. From the repo root after the wheel line (README.md, "The call").
#   OUT=$OUT [REPS=20] [TIMELINE=1] bash benchmarks/decode_cluster_merge/run.sh
. "$(dirname "$0")/../study_start.sh"
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
# The builds first, side by side (the tests' causal-both build and the table's causal-off one).
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal both --jobs 8 \
  > "$OUT/build-tests.log" 2>&1 &
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 8 > "$OUT/build-table.log" 2>&1 &
wait; echo "== builds $(at)"; tail -n 2 "$OUT"/build-*.log
# A hang in the hand-over would stop here, not eat the call: the replays first (2 and 4 splits clustered), then the rest.
timeout 90 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_kvcache_one_launch_gpu.py -k replays \
  > "$OUT/tests-replays.txt" 2>&1
rc=$?; echo "== replay tests rc $rc $(at)"; tail -n 3 "$OUT/tests-replays.txt"
[ "$rc" -eq 0 ] || { sed -n '/FAIL\|Error\|assert/p' "$OUT/tests-replays.txt" | head -20; exit 1; }
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_kvcache_one_launch_gpu.py -k "not replays" \
  > "$OUT/tests.txt" 2>&1
echo "== tests rc $? $(at)"; tail -n 3 "$OUT/tests.txt"
timeout 200 python3 benchmarks/decode/decode_table.py --reps "${REPS:-20}" --skip-no-idx --paths cluster-merge \
  --json "$OUT/table.json" > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"
if [ "${TIMELINE:-1}" = 1 ]; then
  python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
    --no-softcap --jobs 16 --nvcc-flag=-DFLASHBUILD_SPLITKV_TIMELINE=1 > "$OUT/build-timeline.log" 2>&1
  FLASHBUILD_SPLITKV_PATH=cluster-merge timeout 100 python3 benchmarks/decode_timeline/timeline.py --calls 32 \
    --warmup 5 --json "$OUT/timeline.json" > "$OUT/timeline.txt" 2>&1
  echo "== timeline rc $? $(at)"; gzip -f "$OUT/timeline.json" 2>/dev/null
fi
[ "${TIMELINE:-1}" = 1 ] && sed -n '/^| hdim/,$p' "$OUT/timeline.txt"
cat "$OUT/table.txt" | tail -n 22
