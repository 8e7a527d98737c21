#!/usr/bin/env bash
# Issue 45, "Host time of an eager call" (README.md), run 11: one GPU call on this tree (one build: the host changes
# are A/B'd in one process, FLASHBUILD_SPLITKV_PATH=fresh-descriptors plus the full Python checks as the `main-host`
# column) and a study build of the same kernels with the softmax under the previous key block's P V in the split-KV's
# one consumer warpgroup (-DFLASHBUILD_HOPPER_FWD_OVERLAP=1), timed as the `study` column in the same process.
# Steps, each bounded so the whole stays under DEADLINE seconds: the builds (bench, study, the KV-cache tests', head
# dims 32 and 96); the KV-cache GPU tests (test_kvcache_gpu.py, the one-launch and the kept-descriptor ones);
# decode_table.py on a host running nothing else; host_overhead.py; Nsight Compute on hdim 64 batch 8 (4k, 16k keys,
# ours and cuDNN); flashbuild test at head dims 32 and 96 with what time is left. Logs under $OUT/r (tarred to
# $OUT/r.tar.gz), the short tables last. Run from the tree's root.
set -u
OUT=${OUT:-host-time-run}
R=${R:-/tmp/r-host-time}  # the logs; $OUT gets their tarball and the main files (the run tool brings back 8 at most)
rm -rf "$R"
mkdir -p "$R" "$OUT"
DEADLINE=${DEADLINE:-285}
start=$(date +%s)
since() { echo "$(( $(date +%s) - start ))s"; }
left() { local rest=$(( DEADLINE - ($(date +%s) - start) )); (( rest < $1 )) && echo $(( rest > 1 ? rest : 1 )) || echo "$1"; }
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fbc}
OVERLAP=-DFLASHBUILD_HOPPER_FWD_OVERLAP=1
plain="--dtype fp16 --arch native --causal off --no-local --no-softcap"
fb="python3 -m flashbuild"
timeout "$(left 100)" $fb --hdim 64,128 --direction splitkv $plain --jobs 3 > "$R/build-bench.log" 2>&1 &
timeout "$(left 100)" $fb --hdim 64,128 --direction splitkv $plain --nvcc-flag=$OVERLAP --jobs 3 \
  > "$R/build-study.log" 2>&1 &
timeout "$(left 100)" $fb --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal both --jobs 7 \
  > "$R/build-tests.log" 2>&1 &
timeout "$(left 100)" $fb --hdim 32,96 --direction splitkv --dtype fp16 --arch native --causal both --no-local \
  --no-softcap --jobs 3 > "$R/build-h32-96.log" 2>&1 &
wait
echo "builds done at $(since)"
for f in "$R"/build-*.log; do echo "$f: $(tail -n 1 "$f")"; done
py="python3 -m pytest -q -rfE -p no:cacheprovider"
timeout "$(left 55)" $py tests/gpu/test_kvcache_gpu.py tests/gpu/test_kvcache_one_launch_gpu.py \
  tests/gpu/test_kvcache_descriptor_cache_gpu.py > "$R/kvcache-tests.log" 2>&1
echo "kvcache tests rc=$? at $(since)"
# the study column only if its build is there (else the table's load would build it inside the step's time)
study=""
grep -q "^extension" "$R/build-study.log" && study="--study-nvcc-flag=$OVERLAP"
timeout "$(left 150)" python3 benchmarks/decode/decode_table.py --reps 10 --paths main-host --skip-no-idx $study \
  --json "$R/decode_table.json" > "$R/decode_table.txt" 2>&1
echo "table rc=$? at $(since)"
timeout "$(left 25)" python3 benchmarks/decode/host_overhead.py --hdim 128 --calls 1000 --rounds 3 \
  > "$R/host_overhead.txt" 2>&1
echo "host overhead rc=$? at $(since)"
timeout "$(left 35)" ncu --clock-control none --profile-from-start off --print-details all --section SpeedOfLight \
  --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  python3 benchmarks/decode/ncu_small_calls.py --hdim 64 --batch 8 --cache 4096,16384 --build-hdims 64,128 \
  > "$R/ncu.txt" 2>&1
echo "ncu rc=$? at $(since)"
timeout "$(left 30)" $fb test --hdim 32,96 --direction splitkv --dtype fp16 --arch native --causal both --no-local \
  --no-softcap --shapes quick > "$R/flashbuild-test-h32-96.log" 2>&1
echo "flashbuild test h32/96 rc=$? at $(since)"
tar -czf "$OUT/r.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
cp "$R/decode_table.txt" "$R/decode_table.json" "$R/host_overhead.txt" "$R/ncu.txt" "$R/kvcache-tests.log" "$OUT/" 2>/dev/null
echo "== kvcache tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/kvcache-tests.log" | tail -n 6
echo "== flashbuild test h32/96"; grep -E "passed|failed|FAIL" "$R/flashbuild-test-h32-96.log" | tail -n 4
echo "== host overhead"; grep -E "^\|" "$R/host_overhead.txt"
echo "== table"; grep -E "^HBM|^\| (64|128) |^max" "$R/decode_table.txt"
