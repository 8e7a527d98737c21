#!/bin/bash
# One device call: build every variant on all cores, check, then bench; logs and JSON under $OUT
# ({build,check,bench}.{json,log}, gpu.txt, sanitize.txt).
# From the repository root on the nvidia-h200 machine (carry .device/hopper_bwd: the CUTLASS headers):
#   bash benchmarks/hopper_bwd/run.sh [HARNESS ARGS...]      e.g. --variants main --reps 20
# Each phase is its own process under a timeout, so that a hung kernel costs its phase, not the call.
# SANITIZE=v1,v2 adds a compute-sanitizer memcheck of those variants' checks (shapes up to 300 rows).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hopper_bwd_out}
mkdir -p "$OUT" /tmp/cutlass/include
tar -C /tmp/cutlass/include -xzf .device/hopper_bwd/cutlass_include.tar.gz
export CUTLASS_INCLUDE=/tmp/cutlass/include
H="python3 benchmarks/hopper_bwd/hopper_bwd.py"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
nvcc --version | tail -1; python3 -c "import torch; print('torch', torch.__version__, torch.backends.cudnn.version())"

timeout "${BUILD_TIMEOUT:-220}" $H build --out "$OUT" --jobs "$(nproc)" "$@" 2>&1 | tail -16
rc=$?; echo "== build rc $rc at $(( $(date +%s) - t0 )) s"
[ $rc -ne 0 ] && exit $rc

# Phases share the call's limit (LIMIT s, default 405): each gets at most what is left.
left() { local l=$(( ${LIMIT:-405} - ($(date +%s) - t0) )); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
timeout "$(left ${CHECK_TIMEOUT:-150})" $H check --out "$OUT" "$@" > /tmp/check.txt 2>&1
rc=$?; echo "== check rc $rc at $(( $(date +%s) - t0 )) s"
grep -E "^FAIL|^ERROR|checks:|Error|error" /tmp/check.txt | head -30
[ $rc -eq 124 ] && { echo "check timed out (hang?); last lines:"; tail -5 /tmp/check.txt; exit 124; }
[ -n "$SKIP_BENCH_ON_FAIL" ] && [ $rc -ne 0 ] && { tail -5 /tmp/check.txt; exit $rc; }

if [ -n "$SANITIZE" ]; then
  timeout "$(left ${SANITIZE_TIMEOUT:-60})" compute-sanitizer --tool memcheck --error-exitcode 9 \
    $H check --out /tmp/sanitize --only "$SANITIZE" --max-seqlen 300 "$@" > "$OUT/sanitize.txt" 2>&1
  rc=$?; echo "== memcheck rc $rc at $(( $(date +%s) - t0 )) s"
  grep -E "ERROR SUMMARY|checks:|Invalid|^FAIL" "$OUT/sanitize.txt" | head -8
fi

timeout "$(left ${BENCH_TIMEOUT:-150})" $H bench --out "$OUT" "$@" > /tmp/bench.txt 2>&1
rc=$?; echo "== bench rc $rc at $(( $(date +%s) - t0 )) s"
grep -E "refused|Error" /tmp/bench.txt | head -5
# The table (or, when the phase was cut short, the rows it got to).
grep -q '^| variant' /tmp/bench.txt && sed -n '/^| variant/,$p' /tmp/bench.txt || grep '^bench ' /tmp/bench.txt
