#!/usr/bin/env bash
# The cluster merge's second call (README.md, h200-2): the one-launch file's clustered tests with several tiles a
# CTA and its replays, then sanitize.py under compute-sanitizer's memcheck and racecheck. From the repo root after the
# wheel line:   OUT=$OUT bash benchmarks/decode_cluster_merge/check.sh
. "$(dirname "$0")/../study_start.sh"
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal both --jobs 8 \
  > "$OUT/build-tests.log" 2>&1 &
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 8 > "$OUT/build-sanitize.log" 2>&1 &
wait; echo "== builds $(at)"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kvcache_one_launch_gpu.py \
  -k "many_tiles or replays" > "$OUT/tests.txt" 2>&1
echo "== tests rc $? $(at)"; tail -n 3 "$OUT/tests.txt"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 python3 benchmarks/decode_cluster_merge/sanitize.py \
    > "$OUT/$tool.txt" 2>&1
  echo "== $tool rc $? $(at)"; tail -n 4 "$OUT/$tool.txt"
done
