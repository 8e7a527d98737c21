#!/usr/bin/env bash
# Issue 45 on the GPU host, one call: build the two selections the serving tests load (Hopper split-KV and
# forward at head dim 64; the Ampere-path split-KV at head dim 192, which sm90 serves with it), then run the
# device-check, no-sync, compute-sanitizer and CUDA-graph tests, the KV-cache hostile-value test and
# `flashbuild test` of the hdim-64 selection. Logs under $OUT (or ./serving-out). Run from the repo root.
set -u
OUT=${OUT:-serving-out}
mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fbc}
common="--dtype fp16 --arch native --causal off --no-local --no-softcap"
start=$(date +%s)
python3 -m flashbuild --hdim 64 --direction fwd,splitkv $common > "$OUT/build-h64.log" 2>&1 &
a=$!
python3 -m flashbuild --hdim 192 --direction splitkv $common > "$OUT/build-h192.log" 2>&1 &
b=$!
wait $a; ra=$?
wait $b; rb=$?
echo "builds: hdim64 rc=$ra hdim192 rc=$rb in $(( $(date +%s) - start ))s"
tail -n 3 "$OUT/build-h64.log" "$OUT/build-h192.log"
python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_kvcache_index_checks_gpu.py \
  tests/gpu/test_graph_capture_gpu.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - start ))s"
python3 -m flashbuild test --hdim 64 --direction fwd,splitkv $common > "$OUT/flashbuild-test.log" 2>&1
echo "flashbuild test rc=$? in $(( $(date +%s) - start ))s"
grep -E "passed|failed|PASSED|FAILED|ERROR|SKIPPED" "$OUT/pytest.log" | tail -40
tail -15 "$OUT/flashbuild-test.log"
