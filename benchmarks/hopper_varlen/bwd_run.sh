#!/bin/bash
# Packed (varlen) calls on the Hopper backward, on the H200, one device call: the bwd slice of every
# Hopper head dim (fp16), tests/gpu/test_hopper_varlen_bwd_gpu.py on it, the varlen GPU tests of the API
# (fwd+bwd through autograd), then varlen_bench.py --direction bwd (packed against dense calls of the
# same work, kernel times). Logs under $OUT, a short summary last.
#   BUDGET=560 bash benchmarks/hopper_varlen/bwd_run.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/hopper_varlen_bwd}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fb-varlen-bwd}
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
timeout 240 python3 -m flashbuild build --hdim 64,96,128,192,256 --dtype fp16 --arch sm90 --direction bwd \
  --features none > "$OUT/build.txt" 2>&1
echo "== build rc $? at $(now) s"; grep -E "^compiled|error" "$OUT/build.txt" | head -5
timeout 200 python3 -m pytest -q -x -s tests/gpu/test_hopper_varlen_bwd_gpu.py -p no:cacheprovider > "$OUT/pytest.txt" 2>&1
echo "== pytest rc $? at $(now) s"; grep -E "hopper.*bwd_kernel|Error|assert" "$OUT/pytest.txt" | cut -c1-160 | head -8; tail -2 "$OUT/pytest.txt"
left=$(( ${BUDGET:-560} - $(now) - 5 ))
[ $left -gt 30 ] && timeout -s INT $left python3 benchmarks/hopper_varlen/varlen_bench.py --direction bwd \
  --hdims 64,96,128,192,256 --time-hdims ${TIME_HDIMS:-64,128,256} --reps 20 --json "$OUT/varlen-bwd.json" > "$OUT/varlen-bwd.txt" 2>&1
echo "== bench at $(now) s"; grep -E "^\|" "$OUT/varlen-bwd.txt"; tail -3 "$OUT/varlen-bwd.txt" | grep -i error
