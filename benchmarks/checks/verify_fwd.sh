#!/bin/bash
# The GPU tests that the Hopper forward's bottom-aligned causal blocks and paged cache calls touch, on the
# final tree, one device call (2026-11-26): the main job's build and `flashbuild test --shapes full`, then
# tests/gpu/{test_hopper_varlen,test_kvcache_prefill}_gpu.py while time is left.
# Logs under $OUT, a summary last.   BUDGET=380 bash benchmarks/checks/verify_fwd.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/verify_fwd}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/fb-verify
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
{
timeout 200 python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > "$OUT/main-job.txt" 2>&1
echo "== main job rc $? at $(now) s"; grep -E "^compiled|error" "$OUT/main-job.txt" | head -3
timeout 100 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > "$OUT/test-main.txt" 2>&1
echo "== test main rc $? at $(now) s"; grep -E "FAIL" "$OUT/test-main.txt" | head -5; tail -1 "$OUT/test-main.txt"
timeout $(( ${BUDGET:-380} - $(now) - 5 )) python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_kvcache_prefill_gpu.py \
  tests/gpu/test_hopper_varlen_gpu.py > "$OUT/pytest-gpu.txt" 2>&1
echo "== pytest gpu rc $? at $(now) s"; grep -E "^FAILED|^ERROR" "$OUT/pytest-gpu.txt" | head; tail -1 "$OUT/pytest-gpu.txt"
} 2>&1 | tee "$OUT/summary.txt"
