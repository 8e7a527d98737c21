#!/usr/bin/env bash
# The whole tests/gpu suite on a host with several H200s, spread over them with pytest-xdist (one GPU per
# worker, gpu_pin.py beside this file). From the repo root, after the wheel install the README's device
# line gives:
#   WORKERS=8 bash benchmarks/checks/merged-2/call.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
LOG=${OUT:-/tmp/merged-out}; mkdir -p "$LOG"
export FLASHBUILD_CACHE_DIR=/tmp/fbc GPU_PIN_COUNT=$(nvidia-smi -L | wc -l)
export PYTHONPATH="$PWD/benchmarks/checks/merged-2:${PYTHONPATH:-}"
t0=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; python3 -c "import torch; print('torch', torch.__version__)"; } > "$LOG/host.txt" 2>&1
timeout -s INT -k 20 ${LIMIT:-480} python3 -m pytest -q -rfE -p no:cacheprovider -p gpu_pin -n ${WORKERS:-8} \
    --durations=25 tests/gpu > "$LOG/pytest-gpu.txt" 2>&1
echo "tests/gpu rc $? in $(( $(date +%s) - t0 )) s" >> "$LOG/pytest-gpu.txt"
echo "== host"; cat "$LOG/host.txt"
echo "== tests/gpu"; grep -E "^(FAILED|ERROR)" "$LOG/pytest-gpu.txt" | cut -c1-300 | head -30; tail -3 "$LOG/pytest-gpu.txt"
