#!/bin/bash
# The GPU tests that the Hopper backward's head dims 96/192/256 and its packed calls touch, on the final
# tree, one device call (2026-11-26): the main job's build and `flashbuild test --shapes full`, then
# tests/gpu/{test_api,test_features,test_hostile_inputs,test_hopper_bwd,test_hopper_varlen}_gpu.py.
# TESTS (a list of test files) replaces that list. Logs under $OUT, a summary last.
#   [TESTS="tests/gpu/..."] bash benchmarks/checks/verify_bwd.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/verify_bwd}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/fb-verify
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
timeout 200 python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > "$OUT/main-job.txt" 2>&1
echo "== main job rc $? at $(now) s"; grep -E "^compiled|error" "$OUT/main-job.txt" | head -3
timeout 100 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > "$OUT/test-main.txt" 2>&1
echo "== test main rc $? at $(now) s"; grep -E "FAIL" "$OUT/test-main.txt" | head -5; tail -1 "$OUT/test-main.txt"
timeout $(( ${BUDGET:-570} - $(now) - 10 )) python3 -m pytest -q -rs -p no:cacheprovider ${TESTS:-tests/gpu/test_api_gpu.py \
  tests/gpu/test_features_gpu.py tests/gpu/test_hostile_inputs_gpu.py tests/gpu/test_hopper_bwd_gpu.py \
  tests/gpu/test_hopper_varlen_gpu.py} > "$OUT/pytest-gpu.txt" 2>&1
echo "== pytest gpu rc $? at $(now) s"; grep -E "^FAILED|^ERROR" "$OUT/pytest-gpu.txt" | head; tail -2 "$OUT/pytest-gpu.txt"
