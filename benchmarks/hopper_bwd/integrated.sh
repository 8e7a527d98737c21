#!/bin/bash
# The Hopper backward through flashbuild on the H200, now that FAMILY_TABLE[("bwd", "sm90")] = "hopper"
# (see README, "Integration"; run 2026-11-25 on the H200: results/integrated-1/): the
# main job (cold) and its `flashbuild test --shapes full`, the bwd slice of hdim 64/128 fp16/bf16 and its
# test, the GPU API/feature tests that run backward calls, then `flashbuild bench` of the backward
# beside SDPA's flash and cuDNN. Logs under $OUT, a short summary last.
#   bash benchmarks/hopper_bwd/integrated.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/hopper_bwd_integrated}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/fb-bwd-cache
FB="python3 -m flashbuild"
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
MAIN=(--hdim 64 --dtype fp16 --arch sm90)
BWD=(--hdim 64,128 --dtype fp16,bf16 --arch sm90 --direction bwd --features none)
s=$(date +%s.%N); timeout 200 $FB "${MAIN[@]}" > "$OUT/main-job.txt" 2>&1
echo "== main job rc $? in $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s"; grep -E "^compiled|error" "$OUT/main-job.txt" | head -3
timeout 90 $FB test "${MAIN[@]}" --shapes full > "$OUT/test-main.txt" 2>&1
echo "== test main rc $? at $(now) s"; grep -E "FAIL" "$OUT/test-main.txt" | head -6 | cut -c1-200; tail -1 "$OUT/test-main.txt"
timeout 200 $FB build "${BWD[@]}" > "$OUT/build-bwd.txt" 2>&1
echo "== bwd slice build rc $? at $(now) s"; grep -E "^compiled|error" "$OUT/build-bwd.txt" | head -3
timeout 90 $FB test "${BWD[@]}" --shapes full > "$OUT/test-bwd.txt" 2>&1
echo "== test bwd rc $? at $(now) s"; grep -E "FAIL" "$OUT/test-bwd.txt" | head -6 | cut -c1-200; tail -1 "$OUT/test-bwd.txt"
timeout 120 python3 -m pytest -q -x tests/gpu/test_api_gpu.py tests/gpu/test_features_gpu.py tests/gpu/test_hostile_inputs_gpu.py \
  -p no:cacheprovider > "$OUT/pytest-gpu.txt" 2>&1
echo "== pytest gpu rc $? at $(now) s"; tail -3 "$OUT/pytest-gpu.txt"
left=$(( ${BUDGET:-400} - $(now) - 5 ))
[ $left -gt 30 ] && (cd /tmp && timeout -s INT $left $FB bench "${BWD[@]}" --seqlens 1024,4096,16384 --reps 15 \
  --json "$OUT/bench-bwd.json") > "$OUT/bench-bwd.txt" 2>&1
echo "== bench at $(now) s"; grep -vE "^(measuring|using build|nothing to compile|not measured|  )" "$OUT/bench-bwd.txt" | tail -16
