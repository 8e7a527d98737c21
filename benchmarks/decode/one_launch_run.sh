#!/usr/bin/env bash
# Issue 45 item 3 on the GPU host, one call: build the selections the KV-cache tests and the table load, then
# the one-launch decode's tests (tests/gpu/test_kvcache_one_launch_gpu.py), the decode table with the previous
# path beside (FLASHBUILD_SPLITKV_PATH=previous, the same process) and a forced split-count sweep, then the
# existing KV-cache, index-check and graph-capture GPU tests. Logs under $OUT. Run from the repo root.
set -u
OUT=${OUT:-one-launch-out}
mkdir -p "$OUT"
common="--dtype fp16 --arch native"
plain="--causal off --no-local --no-softcap"
start=$(date +%s)
since() { echo "$(( $(date +%s) - start ))s"; }
# 20 compiles at once at most: 16 cores, 128 GB (an nvcc of these TUs takes 2-3 GB)
python3 -m flashbuild --hdim 64,128 --direction splitkv $common --causal both --jobs 8 > "$OUT/build-kvcache.log" 2>&1 &
python3 -m flashbuild --hdim 64,128 --direction splitkv $common $plain --jobs 4 > "$OUT/build-bench.log" 2>&1 &
python3 -m flashbuild --hdim 64 --direction fwd,splitkv $common $plain --jobs 4 > "$OUT/build-h64.log" 2>&1 &
python3 -m flashbuild --hdim 192 --direction splitkv $common $plain --jobs 4 > "$OUT/build-h192.log" 2>&1 &
wait
echo "builds done at $(since)"
for f in "$OUT"/build-*.log; do echo "$f: $(tail -n 1 "$f")"; done
py="python3 -m pytest -q -rA -p no:cacheprovider"
timeout 90 $py tests/gpu/test_kvcache_one_launch_gpu.py > "$OUT/one-launch-tests.log" 2>&1
echo "one-launch tests rc=$? at $(since)"
timeout 110 python3 benchmarks/decode/decode_table.py --sweep-splits 4,8,16,32 --json "$OUT/decode_table.json" \
  > "$OUT/decode_table.txt" 2>&1
echo "decode table rc=$? at $(since)"
timeout 40 $py tests/gpu/test_kvcache_gpu.py > "$OUT/kvcache-tests.log" 2>&1
echo "kvcache tests rc=$? at $(since)"
timeout 100 $py tests/gpu/test_kvcache_index_checks_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > "$OUT/index-graph-tests.log" 2>&1
echo "index/graph tests rc=$? at $(since)"
for f in one-launch-tests kvcache-tests index-graph-tests; do
  echo "== $f"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/$f.log" | tail -n 8
done
grep -A3 -E "^E  |Error" "$OUT/one-launch-tests.log" | head -n 30
tail -n 40 "$OUT/decode_table.txt"
