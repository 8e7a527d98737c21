#!/usr/bin/env bash
# Issue 45, run 15 (README.md, "The split count and the K/V heads' order"): one GPU call on this tree (as run: commit
# fee7074, DEADLINE=215, results/issue45-run15/).
# The default (splits, decode tile) timed graph-replayed beside forced split counts in the same process, in turns with
# SDPA flash and cuDNN, over the issue's 18 rows (batch 1/8/64 x cache 4k/16k/64k x hdim 64/128); Nsight Compute of the
# hdim-64 decode tile at batch 8 and 64 with 16k keys (ours at its own split count and at 4, cuDNN beside: DRAM
# throughput, L2, stall reasons); the KV-cache GPU tests, the decode tile's, the Hopper family's index-check and
# graph-capture tests, `flashbuild test --hdim 64,128 --direction splitkv --causal both --shapes quick`.
# Steps, each bounded so the whole stays under DEADLINE seconds: the bench build first (Nsight Compute runs on it while
# the tests' builds go on: ncu replays each kernel, so the compiles beside it do not move its counters), then the table
# on a host running nothing else, then the tests. Logs under $R (tarred to $OUT/r.tar.gz), the short tables last.
# Run from the tree's root.
set -u
OUT=${OUT:-split-sweep-run}
R=${R:-/tmp/r-split-sweep}
rm -rf "$R"
mkdir -p "$R" "$OUT"
DEADLINE=${DEADLINE:-220}
start=$(date +%s)
since() { echo "$(( $(date +%s) - start ))s"; }
left() { local rest=$(( DEADLINE - ($(date +%s) - start) )); (( rest < $1 )) && echo $(( rest > 1 ? rest : 1 )) || echo "$1"; }
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fbc}
fp16="--dtype fp16 --arch native"
plain="--causal off --no-local --no-softcap"
fb="python3 -m flashbuild"
timeout "$(left 70)" $fb --hdim 64,128 --direction splitkv $fp16 $plain --jobs 8 > "$R/build-bench.log" 2>&1 &
bench=$!
timeout "$(left 110)" $fb --hdim 64,128 --direction splitkv $fp16 --causal both --jobs 5 > "$R/build-tests.log" 2>&1 &
timeout "$(left 110)" $fb --hdim 64,128 --direction splitkv --dtype bf16 --arch native $plain --jobs 1 \
  > "$R/build-bf16.log" 2>&1 &
timeout "$(left 110)" $fb --hdim 64 --direction fwd,splitkv $fp16 $plain --jobs 2 > "$R/build-h64.log" 2>&1 &
wait $bench
echo "bench build rc=$? at $(since)"
timeout "$(left 60)" ncu --clock-control none --profile-from-start off --print-details all --section SpeedOfLight \
  --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed \
  python3 benchmarks/decode/ncu_small_calls.py --hdim 64 --batch 8,64 --cache 16384 --build-hdims 64,128 \
  --splits 0,4 > "$R/ncu.txt" 2>&1
echo "ncu rc=$? at $(since)"
wait
echo "builds done at $(since)"
for f in "$R"/build-*.log; do echo "$f: $(tail -n 1 "$f")"; done
timeout "$(left 100)" python3 benchmarks/decode/decode_table.py --reps 10 --paths "" --skip-no-idx \
  --sweep-splits 2,3,4,8,16,32 --sweep-splits-large 1,2 --json "$R/decode_table.json" > "$R/decode_table.txt" 2>&1
echo "table rc=$? at $(since)"
py="python3 -m pytest -q -rfE -p no:cacheprovider"
timeout "$(left 50)" $py tests/gpu/test_kvcache_decode_tile_gpu.py tests/gpu/test_kvcache_gpu.py \
  tests/gpu/test_kvcache_one_launch_gpu.py tests/gpu/test_kvcache_descriptor_cache_gpu.py > "$R/kvcache-tests.log" 2>&1
echo "kvcache tests rc=$? at $(since)"
timeout "$(left 30)" $py -k hopper tests/gpu/test_kvcache_index_checks_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > "$R/index-graph-tests.log" 2>&1
echo "index/graph tests (hopper) rc=$? at $(since)"
timeout "$(left 40)" $fb test --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal both \
  --shapes quick > "$R/flashbuild-test.log" 2>&1
echo "flashbuild test rc=$? at $(since)"
tar -czf "$OUT/r.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
cp "$R/decode_table.txt" "$R/decode_table.json" "$R/ncu.txt" "$R"/*tests.log "$R/flashbuild-test.log" "$OUT/" 2>/dev/null
for f in kvcache-tests index-graph-tests flashbuild-test; do
  echo "== $f"; grep -E "^(FAILED|ERROR)|passed|failed|[0-9]+ of [0-9]+" "$R/$f.log" | tail -n 4
done
echo "== ncu"; grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|dram__|lts__t_sector_hit" "$R/ncu.txt" | head -n 40
echo "== table"; grep -E "^(\||HBM|batch|Graph)" "$R/decode_table.txt"
