#!/bin/bash
# The GPU checks that the Hopper forward's bottom-aligned causal blocks and paged cache chunks touch, on the
# final tree, one device call (2026-11-26): the main job's build and `flashbuild test --shapes full`,
# tests/gpu/test_kvcache_prefill_gpu.py, the paged prefill timing (benchmarks/decode/prefill_kvcache.py
# --paged 256, on that test's build), then tests/gpu/test_hopper_varlen_gpu.py while time is left.
# Logs under $OUT, a summary last.   BUDGET=400 bash benchmarks/checks/verify_fwd.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/verify_fwd}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/fb-verify
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > "$OUT/main-job.txt" 2>&1
echo "== main job rc $? at $(now) s"; grep -E "^compiled|error" "$OUT/main-job.txt" | head -3
timeout 100 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > "$OUT/test-main.txt" 2>&1
echo "== test main rc $? at $(now) s"; grep -E "FAIL" "$OUT/test-main.txt" | head -5; tail -1 "$OUT/test-main.txt"
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_kvcache_prefill_gpu.py > "$OUT/pytest-prefill.txt" 2>&1
echo "== pytest prefill rc $? at $(now) s"; grep -E "^FAILED|^ERROR" "$OUT/pytest-prefill.txt" | head; tail -1 "$OUT/pytest-prefill.txt"
timeout 90 python3 benchmarks/decode/prefill_kvcache.py --paged 256 --build-hdims 64,128 --seqlens-q 128,1024,4096 \
  --reps 20 --json "$OUT/prefill-paged256.json" > "$OUT/prefill-paged256.txt" 2>&1
echo "== paged prefill rc $? at $(now) s"; grep -A12 "^TFLOPS" "$OUT/prefill-paged256.txt"
timeout $(( ${BUDGET:-400} - $(now) - 5 )) python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_hopper_varlen_gpu.py \
  > "$OUT/pytest-varlen.txt" 2>&1
echo "== pytest varlen rc $? at $(now) s"; grep -E "^FAILED|^ERROR" "$OUT/pytest-varlen.txt" | head; tail -1 "$OUT/pytest-varlen.txt"
} 2>&1 | tee "$OUT/summary.txt"
