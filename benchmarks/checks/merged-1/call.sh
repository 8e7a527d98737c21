#!/usr/bin/env bash
# One H200 call on the tree after issues 43/44/45/47/48/49 were merged (2026-11-28): the whole tests/gpu suite,
# and beside it (same call, sharing the 16 cores) FA3 hopper/ at 0251105a narrowed to hdim 128 fp16 fwd+bwd,
# causal on, features none, built and run against the tree's own hopper/test_flash_attn.py through
# flashbuild.sources.pytest_slice. From the repo root, with the FA3 archive carried (docs/fa3.md):
#   DATA=.device/wup-data bash benchmarks/checks/merged-1/call.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
LOG=${OUT:-/tmp/merged-out}; mkdir -p "$LOG"; DATA=${DATA:-.device/wup-data}
export FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch; print('torch', torch.__version__)"; } > "$LOG/host.txt" 2>&1
# FA3 narrowed slice + its upstream tests, in the background
( mkdir -p /tmp/trees/fa3 && tar -C /tmp/trees/fa3 -xzf "$DATA/fa3-0251105a-cutlass-7127592.tar.gz" &&
  SLICE=(--source /tmp/trees/fa3 --profile flash-attn-3 --hdim 128 --dtype fp16 --arch sm90 --direction fwd,bwd --causal on --features none) &&
  s=$(date +%s) && FLASHBUILD_CACHE_DIR=/tmp/fbc3 python3 -m flashbuild build "${SLICE[@]}" --jobs 5 > "$LOG/fa3-build.txt" 2>&1;
  echo "fa3 build rc $? in $(( $(date +%s) - s )) s" >> "$LOG/fa3-build.txt";
  cd /tmp && FLASHBUILD_CACHE_DIR=/tmp/fbc3 timeout -s INT -k 15 150 python3 -m flashbuild run "${SLICE[@]}" -- python3 -m pytest \
    /tmp/trees/fa3/hopper/test_flash_attn.py -p flashbuild.sources.pytest_slice -p no:cacheprovider --import-mode=append -q -x \
    > "$LOG/fa3-tests.txt" 2>&1; echo "fa3 tests rc $?" >> "$LOG/fa3-tests.txt" ) &
fa3=$!
timeout -s INT -k 20 430 python3 -m pytest -q -rfE -p no:cacheprovider tests/gpu > "$LOG/pytest-gpu.txt" 2>&1
echo "tests/gpu rc $? in $(( $(date +%s) - t0 )) s" >> "$LOG/pytest-gpu.txt"
wait $fa3
echo "== host"; cat "$LOG/host.txt"
echo "== fa3"; tail -2 "$LOG/fa3-build.txt"; grep -E "flashbuild slice|passed|failed|deselected|rc " "$LOG/fa3-tests.txt" | tail -5
echo "== tests/gpu"; grep -E "^(FAILED|ERROR)" "$LOG/pytest-gpu.txt" | cut -c1-300 | head -20; tail -3 "$LOG/pytest-gpu.txt"
