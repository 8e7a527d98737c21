#!/bin/bash
# The Hopper forward as flashbuild serves it (the family table picks hopper/fwd_launch.h for fwd on
# sm90): the main job built through the CLI, the GPU tests (the drop-in API, hostile inputs, the
# forward checks), `flashbuild test`, `inspect` (HGMMA, registers, spills) and `bench` beside SDPA's
# flash and cuDNN backends, in one run on the GPU machine. From the repository root, with the wheels
# it needs installed (nvidia-cutlass; see benchmarks/README.md):
#   bash benchmarks/hopper_fwd/integrated.sh
# Logs under $OUT; a short summary is printed last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/hopper_integrated}
mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-$PWD/.flashbuild-cache}
FB="python3 -m flashbuild"
MAIN=(--hdim 64 --dtype fp16 --arch sm90)
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import torch; print('torch', torch.__version__)"
step() { echo "== $1 at $(( $(date +%s) - t0 )) s"; }

step "main job (cold)"
/usr/bin/time -f "main job: %e s wall, %M KiB peak" $FB "${MAIN[@]}" > "$OUT/main-job.txt" 2>&1; echo "rc $?"
tail -16 "$OUT/main-job.txt"
step "no-op rebuild"
/usr/bin/time -f "no-op: %e s wall" $FB "${MAIN[@]}" 2>&1 | tail -2

step "GPU tests"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hostile_inputs_gpu.py tests/gpu/test_fwd_gpu.py \
  tests/gpu/test_api_gpu.py > "$OUT/pytest-gpu.txt" 2>&1; echo "rc $?"
grep -E "passed|failed|error" "$OUT/pytest-gpu.txt" | tail -3; grep -E "^FAILED|^ERROR" "$OUT/pytest-gpu.txt" | head -20

step "flashbuild test"
$FB test "${MAIN[@]}" --json "$OUT/test.json" > "$OUT/test.txt" 2>&1; echo "rc $?"
tail -4 "$OUT/test.txt"

step "inspect"
$FB inspect "${MAIN[@]}" > "$OUT/inspect.txt" 2>&1; echo "rc $?"
grep -E "^variant|^fwd_" "$OUT/inspect.txt" | head -12

step "bench (16k tokens per batch, dim 2048; the main job's build)"
timeout 240 $FB bench "${MAIN[@]}" --seqlens 1k,4k,16k --reps 20 --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
echo "rc $?"; tail -40 "$OUT/bench.txt"
step "done"
