#!/bin/bash
# One device call for issue 46 (the backward hand-offs): build the baseline (A) and the candidates of study.py
# PLAN on all cores, check every one against the fp32 reference, then time them in turns with SDPA's flash
# and cuDNN backends. Logs and JSON under $OUT (gpu.txt, check.log/json, bench.log/json, build-*.json).
# From the root of a copy of the tree on the nvidia-h200 machine, with the CUTLASS 4.2 headers as a tarball
# of include/ (cute, cutlass) at $CUTLASS_TAR (default cutlass_include.tar.gz in that root):
#   LIMIT=380 bash benchmarks/hopper_bwd_hand_off/run.sh [--reps 20] [--seqlens 1024,4096,16384]
set -o pipefail
case "$1" in -h|--help) sed -n '2,7p' "$0"; exit 0;; esac
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/hopper_bwd_hand_off_out}
mkdir -p "$OUT" /tmp/cutlass/include
tar -C /tmp/cutlass/include -xzf "${CUTLASS_TAR:-cutlass_include.tar.gz}" || exit 2
export CUTLASS_INCLUDE=/tmp/cutlass/include
S="python3 benchmarks/hopper_bwd_hand_off/study.py"
t0=$(date +%s)
left() { local l=$(( ${LIMIT:-380} - ($(date +%s) - t0) )); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
nvcc --version | tail -1; python3 -c "import torch; print('torch', torch.__version__, torch.backends.cudnn.version())"

# Build (every TU at once) and link, then the checks; a phase that hangs costs its own timeout only.
timeout "$(left ${CHECK_TIMEOUT:-240})" $S check --out "$OUT" --jobs "$(nproc)" "$@" > /tmp/check.txt 2>&1
rc=$?; echo "== build + check rc $rc at $(( $(date +%s) - t0 )) s"
grep -E "^build:|  TU |checks:|failed:|^FAIL|^ERROR|Error" /tmp/check.txt | cut -c1-230 | head -40
[ $rc -eq 124 ] && { echo "check timed out; last lines:"; tail -5 /tmp/check.txt; }
grep -q "^build:" /tmp/check.txt || { tail -30 /tmp/check.txt; exit 3; }

timeout "$(left ${BENCH_TIMEOUT:-200})" $S bench --out "$OUT" "$@" > /tmp/bench.txt 2>&1
rc=$?; echo "== bench rc $rc at $(( $(date +%s) - t0 )) s"
grep -E "refused|Error" /tmp/bench.txt | head -5
grep -q '^| hdim' /tmp/bench.txt && sed -n '/^| hdim/,$p' /tmp/bench.txt || grep '^bench ' /tmp/bench.txt
