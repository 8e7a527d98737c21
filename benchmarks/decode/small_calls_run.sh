#!/usr/bin/env bash
# The small decoding calls on the GPU host, one call (issue 45, 2026-11-28, "Small calls" in README.md): build the
# selections the tests and the table load; the split-KV kernel's SASS around its start (the programmatic launch's
# griddepcontrol instructions); the one-launch tests (the default, programmatic launch bit for bit against plain
# launches, chains of calls reading what the kernel before wrote); the decode table, every row, with the default
# path beside the same launched plainly (FLASHBUILD_SPLITKV_PATH=no-pdl) and a forced split sweep, the columns of a
# row in turns; Nsight Compute on the batch-1 and batch-8 calls with 4k keys (ours and cuDNN); the host time of an
# eager call and its parts; the KV-cache, index-check and graph-capture GPU tests of the Hopper family. Every step
# bounded so the whole stays under DEADLINE seconds; logs under $OUT/r (tarred to $OUT/r.tar.gz), the short tables
# last. Run from the repo root.
set -u
OUT=${OUT:-small-calls-out}
R="$OUT/r"
mkdir -p "$R"
DEADLINE=${DEADLINE:-330}
start=$(date +%s)
since() { echo "$(( $(date +%s) - start ))s"; }
# a step's timeout: its own limit, or what is left of the deadline if that is less
left() { local rest=$(( DEADLINE - ($(date +%s) - start) )); (( rest < $1 )) && echo $(( rest > 1 ? rest : 1 )) || echo "$1"; }
common="--dtype fp16 --arch native"
timeout "$(left 120)" python3 -m flashbuild --hdim 64,128 --direction splitkv $common --causal both --jobs 8 \
  > "$R/build-tests.log" 2>&1 &
timeout "$(left 120)" python3 -m flashbuild --hdim 64,128 --direction splitkv $common --causal off --no-local \
  --no-softcap --jobs 4 > "$R/build-bench.log" 2>&1 &
timeout "$(left 120)" python3 -m flashbuild --hdim 64 --direction fwd,splitkv $common --causal off --no-local \
  --no-softcap --jobs 4 > "$R/build-h64.log" 2>&1 &
wait
echo "builds done at $(since)"
for f in "$R"/build-*.log; do echo "$f: $(tail -n 1 "$f")"; done
obj=$(find "${FLASHBUILD_CACHE_DIR:-/nonexistent}" -path '*h64+128-splitkv-c0-*' -name 'splitkv_hdim128_fp16_sm90_kernel.o' | head -n 1)
if [ -n "$obj" ]; then
  cuobjdump -sass "$obj" > "$R/sass-hdim128.txt" 2>&1
  echo "SASS $obj: $(grep -ciE 'ACQBULK|PREEXIT|griddep' "$R/sass-hdim128.txt") griddepcontrol-like lines"
  grep -niE 'ACQBULK|PREEXIT|griddep' "$R/sass-hdim128.txt" | head -n 6
fi
py="python3 -m pytest -q -rfE -p no:cacheprovider"
timeout "$(left 90)" $py tests/gpu/test_kvcache_one_launch_gpu.py > "$R/one-launch-tests.log" 2>&1
echo "one-launch tests rc=$? at $(since)"
timeout "$(left 110)" python3 benchmarks/decode/decode_table.py --reps 10 --paths no-pdl --skip-no-idx \
  --sweep-splits 4,8,16,32 --json "$R/decode_table.json" > "$R/decode_table.txt" 2>&1
echo "decode table rc=$? at $(since)"
timeout "$(left 50)" ncu --clock-control none --profile-from-start off --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis -f -o "$R/ncu" \
  python3 benchmarks/decode/ncu_small_calls.py > "$R/ncu-run.log" 2>&1
echo "ncu rc=$? at $(since)"
[ -f "$R/ncu.ncu-rep" ] && ncu --import "$R/ncu.ncu-rep" --page details > "$R/ncu.txt" 2>&1
[ -f "$R/ncu.ncu-rep" ] && ncu --import "$R/ncu.ncu-rep" --page raw --csv --metrics \
  gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,sm__cycles_active.avg,sm__cycles_elapsed.avg \
  > "$R/ncu-metrics.csv" 2>&1
timeout "$(left 25)" python3 benchmarks/decode/host_overhead.py --calls 2000 > "$R/host_overhead.txt" 2>&1
echo "host overhead rc=$? at $(since)"
timeout "$(left 45)" $py tests/gpu/test_kvcache_gpu.py > "$R/kvcache-tests.log" 2>&1
echo "kvcache tests rc=$? at $(since)"
timeout "$(left 60)" $py -k hopper tests/gpu/test_kvcache_index_checks_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > "$R/index-graph-tests.log" 2>&1
echo "index/graph tests (hopper) rc=$? at $(since)"
tar -czf "$OUT/r.tar.gz" -C "$OUT" r
for f in one-launch-tests kvcache-tests index-graph-tests; do
  echo "== $f"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/$f.log" | tail -n 6
done
grep -A4 -E "^E  " "$R/one-launch-tests.log" | head -n 20
echo "== ncu"; [ -f "$R/ncu-metrics.csv" ] && python3 benchmarks/decode/ncu_summary.py "$R/ncu-metrics.csv" \
  | tee "$R/ncu-summary.txt" | head -n 14
cat "$R/host_overhead.txt" | tail -n 8
tail -n 32 "$R/decode_table.txt"
