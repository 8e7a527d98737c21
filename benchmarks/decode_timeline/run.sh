#!/usr/bin/env bash
# One nvidia-h200 call (README.md beside): the study build of the split-KV (-DFLASHBUILD_SPLITKV_TIMELINE=1, hdim 64
# and 128, plain, non-causal), then timeline.py's rows, graph-replayed and eager; results under $OUT, the short table
# printed last. Run from the repo root after the wheel line (README.md, "The call"). ROWS (timeline.py's --rows,
# hdim:batch:cache, comma-separated) picks other rows than the script's default four.
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
FLAG=-DFLASHBUILD_SPLITKV_TIMELINE=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
start=$(date +%s)
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 16 --nvcc-flag=$FLAG > "$OUT/build.log" 2>&1
build_rc=$?
echo "build rc $build_rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/build.log"
if [ "$build_rc" -ne 0 ]; then tail -n 40 "$OUT/build.log"; exit "$build_rc"; fi
python3 benchmarks/decode_timeline/timeline.py ${ROWS:+--rows "$ROWS"} --calls 32 --warmup 5 --json "$OUT/timeline.json" \
  > "$OUT/timeline.txt" 2>&1
rc=$?
gzip -f "$OUT/timeline.json" 2>/dev/null
echo "timeline rc $rc; total $(( $(date +%s) - start )) s"
tail -n 16 "$OUT/timeline.txt"
exit "$rc"
