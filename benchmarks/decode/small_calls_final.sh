#!/usr/bin/env bash
# The small decoding calls' second GPU call (issue 45, 2026-11-28, "Small calls" in README.md): the kept tree
# (programmatic launch in graph captures, two key blocks per split at batch 1) built with the selections the tests
# and the table load, and the hdim-64 split-KV again with six pipeline stages (-DFLASHBUILD_SPLITKV_STAGES_HDIM64=6);
# the one-launch tests; the decode table, every row, with the launch variants beside the default (no-pdl,
# pdl-early, pdl-late: FLASHBUILD_SPLITKV_PATH) and a split sweep, the columns of a row in turns; the hdim-64 rows
# with four stages and with six, processes alternating; the host time of an eager call; flashbuild test's KV-cache
# checks; the KV-cache, index-check and graph-capture GPU tests of the Hopper family. Every step bounded so the
# whole stays under DEADLINE seconds; logs under $OUT/r (tarred to $OUT/r.tar.gz), the short tables last.
# Run from the repo root. As run (commit 3b0999a: results/issue45-run7/); since, the six stages lost and their macro
# is gone (the "six" build is the four-stage kernel again), and the default is the programmatic launch eagerly too
# (the table's pdl-early column).
set -u
OUT=${OUT:-small-calls-final}
R="$OUT/r"
mkdir -p "$R"
DEADLINE=${DEADLINE:-200}
start=$(date +%s)
since() { echo "$(( $(date +%s) - start ))s"; }
left() { local rest=$(( DEADLINE - ($(date +%s) - start) )); (( rest < $1 )) && echo $(( rest > 1 ? rest : 1 )) || echo "$1"; }
common="--dtype fp16 --arch native"
plain="--causal off --no-local --no-softcap"
six="--nvcc-flag=-DFLASHBUILD_SPLITKV_STAGES_HDIM64=6"
timeout "$(left 100)" python3 -m flashbuild --hdim 64,128 --direction splitkv $common --causal both --jobs 6 \
  > "$R/build-tests.log" 2>&1 &
timeout "$(left 100)" python3 -m flashbuild --hdim 64,128 --direction splitkv $common $plain --jobs 4 \
  > "$R/build-bench.log" 2>&1 &
timeout "$(left 100)" python3 -m flashbuild --hdim 64 --direction splitkv $common $plain $six --jobs 2 \
  > "$R/build-six.log" 2>&1 &
timeout "$(left 100)" python3 -m flashbuild --hdim 64 --direction fwd,splitkv $common $plain --jobs 4 \
  > "$R/build-h64.log" 2>&1 &
wait
echo "builds done at $(since)"
for f in "$R"/build-*.log; do echo "$f: $(tail -n 1 "$f")"; done
py="python3 -m pytest -q -rfE -p no:cacheprovider"
timeout "$(left 60)" $py tests/gpu/test_kvcache_one_launch_gpu.py > "$R/one-launch-tests.log" 2>&1
echo "one-launch tests rc=$? at $(since)"
timeout "$(left 40)" python3 benchmarks/decode/decode_table.py --reps 10 --paths no-pdl,pdl-early,pdl-late \
  --skip-no-idx --sweep-splits 8,16,32 --json "$R/decode_table.json" > "$R/decode_table.txt" 2>&1
echo "decode table rc=$? at $(since)"
for round in 1 2; do
  timeout "$(left 15)" python3 benchmarks/decode/decode_table.py --hdim 64 --build-hdims 64,128 --reps 10 --paths "" --cache 4096,65536 \
    --skip-no-idx > "$R/stages4-round$round.txt" 2>&1
  timeout "$(left 15)" python3 benchmarks/decode/decode_table.py --hdim 64 --build-hdims 64 $six --reps 10 --paths "" --cache 4096,65536 \
    --skip-no-idx > "$R/stages6-round$round.txt" 2>&1
done
echo "stage rounds done at $(since)"
timeout "$(left 20)" python3 benchmarks/decode/host_overhead.py --calls 1000 --rounds 3 > "$R/host_overhead.txt" 2>&1
echo "host overhead rc=$? at $(since)"
timeout "$(left 40)" python3 -m flashbuild test --hdim 64,128 --dtype fp16 --arch native --direction splitkv \
  --shapes quick > "$R/flashbuild-test.log" 2>&1
echo "flashbuild test rc=$? at $(since)"
timeout "$(left 20)" $py tests/gpu/test_kvcache_gpu.py > "$R/kvcache-tests.log" 2>&1
echo "kvcache tests rc=$? at $(since)"
timeout "$(left 40)" $py -k hopper tests/gpu/test_kvcache_index_checks_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > "$R/index-graph-tests.log" 2>&1
echo "index/graph tests (hopper) rc=$? at $(since)"
tar -czf "$OUT/r.tar.gz" -C "$OUT" r
for f in one-launch-tests kvcache-tests index-graph-tests flashbuild-test; do
  echo "== $f"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/$f.log" | tail -n 4
done
grep -A4 -E "^E  " "$R/one-launch-tests.log" | head -n 16
tail -n 9 "$R/host_overhead.txt"
for f in "$R"/stages*-round*.txt; do echo "== $f"; grep -E "^\| 64 " "$f" | cut -d'|' -f2-5; done
tail -n 26 "$R/decode_table.txt"
