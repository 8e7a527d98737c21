#!/bin/bash
# Packed (varlen) calls on the Hopper forward, one GPU call (issue 18). From the repository root, after
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   BASE=.device/base bash benchmarks/hopper_varlen/run.sh
# 1. the GPU tests of packed calls, side by side: tests/gpu/test_hopper_varlen_gpu.py (head dims 64-256,
#    its own build), and the varlen tests of test_api_gpu.py, test_features_gpu.py, test_persistent_fwd_gpu.py;
# 2. varlen_bench.py on this tree (hdims 64,128,256: the test's build), then, with BASE (a tree whose
#    forward sends packed calls to the Ampere-path fallback), on that tree (hdims 64,128).
# Logs under $OUT; the tables last.
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/varlen_out}; mkdir -p "$OUT"; t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
export FLASHBUILD_CACHE_DIR=/tmp/varlen_cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
pt() { timeout 330 python3 -m pytest -q -rs -p no:cacheprovider "$@"; }
pt tests/gpu/test_hopper_varlen_gpu.py > "$OUT/test-hopper-varlen.txt" 2>&1 &
pt tests/gpu/test_api_gpu.py -k varlen > "$OUT/test-api-varlen.txt" 2>&1 &
pt tests/gpu/test_features_gpu.py -k varlen > "$OUT/test-features-varlen.txt" 2>&1 &
pt tests/gpu/test_persistent_fwd_gpu.py > "$OUT/test-persistent-fwd.txt" 2>&1 &
wait; echo "== tests $(at)"
for f in "$OUT"/test-*.txt; do echo "$(basename "$f"): $(tail -1 "$f")"; done
timeout 200 python3 benchmarks/hopper_varlen/varlen_bench.py --hdims 64,96,128,192,256 --time-hdims 64,128,256 \
  --json "$OUT/varlen-new.json" > "$OUT/varlen-new.txt" 2>&1; echo "== bench new rc $? $(at)"
if [ -n "$BASE" ]; then
  (cd "$BASE" && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/varlen_cache_base timeout 200 python3 \
    "$OLDPWD/benchmarks/hopper_varlen/varlen_bench.py" --hdims 64,128 --json "$OUT/varlen-base.json") \
    > "$OUT/varlen-base.txt" 2>&1; echo "== bench base rc $? $(at)"
fi
for f in "$OUT"/varlen-*.txt; do echo "== $(basename "$f")"; sed -n '/^| hdim/,$p' "$f"; done
