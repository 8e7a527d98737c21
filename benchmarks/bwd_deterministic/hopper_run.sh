#!/bin/bash
# Deterministic mode on the Hopper backward (sm90), one device call on the nvidia-h200 machine, from the
# repository root:
#   BUDGET=570 bash benchmarks/bwd_deterministic/hopper_run.sh
# Builds, side by side, the bench's selection (hdim 64-256, fp16, fwd+bwd, causal both, no features: the
# Hopper backward's plain kernels hold the mode) and tests/gpu/test_hopper_bwd_gpu.py's; `inspect` (HGMMA,
# registers, spills); the GPU tests of the Hopper backward (its deterministic tests and profiles included);
# then hopper.py: default and deterministic calls beside SDPA's cuDNN and flash, in turns. Logs and JSON
# under $OUT; the table last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/bwd_det_hopper}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fb-det-hopper}
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
HDIMS=${HDIMS:-64,96,128,192,256}
SEL=(--hdim "$HDIMS" --dtype fp16 --arch sm90 --direction fwd,bwd --causal both --features none)
timeout 330 python3 -m flashbuild build "${SEL[@]}" -j 10 > "$OUT/build-bench.txt" 2>&1 &
(cd tests/gpu && timeout 330 python3 -c "import flashbuild, test_hopper_bwd_gpu as t; flashbuild.load(**t.SELECTION)" \
  > "$OUT/build-tests.txt" 2>&1; echo "== tests' build rc $?") &
wait; echo "== builds at $(now) s"; grep -E "^compiled|rror" "$OUT/build-bench.txt" | head -3
timeout 90 python3 -m flashbuild inspect "${SEL[@]}" > "$OUT/inspect.txt" 2>&1; grep -iE "spill|bwd_hdim" "$OUT/inspect.txt" | head -24
timeout 200 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hopper_bwd_gpu.py > "$OUT/pytest-hopper-bwd.txt" 2>&1
echo "== pytest rc $? at $(now) s"; grep -E "hopper.*bwd_kernel|Error|assert|FAILED" "$OUT/pytest-hopper-bwd.txt" | cut -c1-200 | head -10
tail -2 "$OUT/pytest-hopper-bwd.txt"
left=$(( ${BUDGET:-570} - $(now) - 5 ))
[ $left -gt 30 ] && timeout -s INT $left python3 benchmarks/bwd_deterministic/hopper.py --hdims "$HDIMS" \
  --seqlens ${SEQLENS:-1024,4096,16384} --reps ${REPS:-15} --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
echo "== bench rc $? at $(now) s"
cat "$OUT/bench.txt"
