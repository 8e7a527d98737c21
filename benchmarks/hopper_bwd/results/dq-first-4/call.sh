#!/bin/bash
# Issue 19, the final tree (dQ first at hdim 96/128): the Hopper backward's GPU tests (head dims 96/192/256, and
# local + softcap at 64-256, deterministic bits included), then the API tests.
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 FLASHBUILD_CACHE_DIR=/tmp/cache28
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
S=$(date +%s); at() { echo "at $(( $(date +%s) - S )) s"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in test_hopper_bwd_gpu test_api_gpu; do
  L=$(( 585 - ($(date +%s) - S) )); [ $L -lt 30 ] && { echo "skip $t"; continue; }
  timeout $L python3 -m pytest -q -p no:cacheprovider tests/gpu/$t.py > $OUT/$t.txt 2>&1
  echo "$t rc $? $(at): $(tail -1 $OUT/$t.txt)"
done
