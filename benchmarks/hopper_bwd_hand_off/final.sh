#!/bin/bash
# Issue 46, the kept hand-offs through flashbuild (one device call): build the selection of
# tests/gpu/test_bwd_deterministic_gpu.py (fwd + bwd, hdim 64/128, fp16 and bf16, causal both, local + softcap
# compiled in, arch native), `flashbuild test --shapes full` of it, the deterministic mode's GPU tests on that
# build (identical bits; the window test and the hdim-32 build left out), then `flashbuild bench` with what is left.
# From a copy of the tree on the nvidia-h200 machine with /work/main's .whl installed (README.md, "Runs"):
#   cd .device/w46b && OUT=$OUT LIMIT=200 bash benchmarks/hopper_bwd_hand_off/final.sh
case "$1" in -h|--help) sed -n '2,7p' "$0"; exit 0;; esac
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 FLASHBUILD_CACHE_DIR=/tmp/fbc46b
OUT=${OUT:-/tmp/hopper_bwd_hand_off_final}; mkdir -p "$OUT"
S=$(date +%s); at() { echo "at $(( $(date +%s) - S )) s"; }
left() { echo $(( ${LIMIT:-200} - ($(date +%s) - S) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
SEL="--hdim 64,128 --dtype fp16,bf16 --arch native --direction fwd,bwd --causal both"
timeout 130 python3 -m flashbuild $SEL -j 16 > $OUT/build.txt 2>&1; echo "build rc $? $(at)"; grep -E "^compiled|^built|rror" $OUT/build.txt | head -3; tail -1 $OUT/build.txt
timeout $(( $(left) - 40 )) python3 -m flashbuild test $SEL --shapes full > $OUT/test.txt 2>&1
echo "test rc $? $(at): $(tail -1 $OUT/test.txt)"; grep -E " fail$| FAIL" $OUT/test.txt | head -5
(timeout $(( $(left) - 5 )) python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_bwd_deterministic_gpu.py \
  -k "not local_window and not without_features" > $OUT/det.txt 2>&1); echo "det rc $? $(at): $(tail -1 $OUT/det.txt)"
grep -E "^FAILED|^ERROR" $OUT/det.txt | head -5
L=$(left); [ $L -gt 15 ] && timeout -s INT -k 5 $L python3 -m flashbuild bench $SEL --seqlens 16384 --reps 5 \
  --json $OUT/bench.json > $OUT/bench.txt 2>&1; echo "bench rc $? $(at)"
grep -E "bwd" $OUT/bench.txt | grep -vE "^(measuring|using build)" | tail -12
