#!/bin/bash
# Issue 46, the kept hand-offs through flashbuild (one device call): build the backward at hdim 64/128 (fp16, bf16,
# causal both, local + softcap compiled in), `flashbuild test --shapes full`, deterministic mode's bits (two calls
# of each shape identical: ../bwd_deterministic/hopper.py, fp16, 4k), then `flashbuild bench` beside SDPA.
# From a copy of the tree on the nvidia-h200 machine with /work/main's .whl carried (README.md, "Runs"):
#   cd .device/w46b && OUT=$OUT bash benchmarks/hopper_bwd_hand_off/final.sh
case "$1" in -h|--help) sed -n '2,6p' "$0"; exit 0;; esac
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 FLASHBUILD_CACHE_DIR=/tmp/fbc46b
OUT=${OUT:-/tmp/hopper_bwd_hand_off_final}; mkdir -p "$OUT"
S=$(date +%s); at() { echo "at $(( $(date +%s) - S )) s"; }
left() { echo $(( ${LIMIT:-300} - ($(date +%s) - S) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
SEL="--hdim 64,128 --dtype fp16,bf16 --arch sm90 --direction bwd --causal both"
timeout 120 python3 -m flashbuild $SEL -j 16 > $OUT/build.txt 2>&1; echo "build rc $? $(at)"; grep -E "^compiled|rror" $OUT/build.txt | head -3
timeout 90 python3 -m flashbuild test $SEL --shapes full > $OUT/test.txt 2>&1; echo "test rc $? $(at): $(tail -1 $OUT/test.txt)"
timeout $(( $(left) - 75 )) python3 benchmarks/bwd_deterministic/hopper.py --hdims 64,128 --seqlens 4096 --reps 5 \
  --json $OUT/det.json > $OUT/det.txt 2>&1; echo "det rc $? $(at)"; grep -E "^\| (64|128) " $OUT/det.txt
timeout -s INT -k 10 $(left) python3 -m flashbuild bench $SEL --seqlens 1024,4096,16384 --reps 10 \
  --json $OUT/bench.json > $OUT/bench.txt 2>&1
echo "bench rc $? $(at)"
grep -vE "^(measuring|using build|nothing to compile|not measured)" $OUT/bench.txt | tail -30
