#!/bin/bash
# The GPU checks of the moved tree, in one call on the H200 (run from the tree's root, with $OUT set):
#   1. flashbuild test of hdim 64 and 128, fp16, sm90, every direction, causal and not, plain TUs (the Hopper
#      forward, backward and split-KV, whose helpers moved to kernels/common/ and hopper/sm90.h);
#   2. tests/gpu/test_persistent_fwd_gpu.py (the Hopper forward's persistent scheduler, hdim 256) in what is left.
# BUDGET: seconds for both (default 220).
export PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fbc}
budget=${BUDGET:-220}
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
timeout $((budget - 20)) python3 -m flashbuild test --hdim 64,128 --dtype fp16 --arch sm90 --features none --jobs 16 \
  > "$OUT/flashbuild-test.txt" 2>&1
echo "flashbuild test rc $?" | tee -a "$OUT/summary.txt"
left=$((budget - ($(date +%s) - start)))
if [ $left -gt 40 ]; then
  timeout $left python3 -m pytest -q tests/gpu/test_persistent_fwd_gpu.py > "$OUT/pytest-persistent.txt" 2>&1
  echo "pytest test_persistent_fwd_gpu rc $? ($(tail -1 "$OUT/pytest-persistent.txt"))" | tee -a "$OUT/summary.txt"
else
  echo "pytest test_persistent_fwd_gpu: not run ($left s left)" | tee -a "$OUT/summary.txt"
fi
echo "wall $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
tail -25 "$OUT/flashbuild-test.txt"
