#!/bin/bash
# One device call: build every variant on all cores, check, then bench; logs and JSON under $OUT.
# From the repository root on the nvidia-h200 machine (carry .device/hopper_fwd: the CUTLASS headers):
#   bash benchmarks/hopper_fwd/run.sh [HARNESS ARGS...]      e.g. --variants main,features --reps 30
# Each phase is its own process under a timeout, so that a hung kernel costs its phase, not the call.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hopper_fwd_out}
mkdir -p "$OUT" /tmp/cutlass/include
tar -C /tmp/cutlass/include -xzf .device/hopper_fwd/cutlass_include.tar.gz
export CUTLASS_INCLUDE=/tmp/cutlass/include
H="python3 benchmarks/hopper_fwd/hopper_fwd.py"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
nvcc --version | tail -1; python3 -c "import torch; print('torch', torch.__version__, torch.backends.cudnn.version())"

timeout 330 $H build --out "$OUT" --jobs "$(nproc)" "$@" 2>&1 | tail -40
rc=$?; echo "== build rc $rc at $(( $(date +%s) - t0 )) s"
[ $rc -ne 0 ] && exit $rc

timeout "${CHECK_TIMEOUT:-150}" $H check --out "$OUT" "$@" > "$OUT/check.txt" 2>&1
rc=$?; echo "== check rc $rc at $(( $(date +%s) - t0 )) s"
grep -E "^FAIL|^ERROR|checks:" "$OUT/check.txt" | head -40
[ $rc -eq 124 ] && { echo "check timed out (hang?); last lines:"; tail -5 "$OUT/check.txt"; exit 124; }

timeout "${BENCH_TIMEOUT:-200}" $H bench --out "$OUT" "$@" > "$OUT/bench.txt" 2>&1
rc=$?; echo "== bench rc $rc at $(( $(date +%s) - t0 )) s"
grep -E "refused" "$OUT/bench.txt" | head -5
sed -n '/^| variant/,$p' "$OUT/bench.txt"
