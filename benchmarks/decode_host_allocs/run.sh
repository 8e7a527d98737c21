#!/usr/bin/env bash
# Issue 45's eager host time (README.md beside), one nvidia-h200 call per part. PART=tests: the builds the KV-cache GPU
# files load (in parallel), then those files (plain decode, one launch, pairs, index checks on both families, graph
# capture, prefill chunks). PART=perf: ours (hdim 64, 128) built, FlashInfer's decode modules compiled, then
# host_overhead.py (with torch.profiler's tables) and decode_table.py --flashinfer. PART=sanitize: compute-sanitizer
# memcheck over the bad index values of both families, the pairs' bad values and the host-path test at hdim 128. Carry
# `.whl` (and `.device/flashinfer` for perf). From the repo root after the wheel line:
#   OUT=$OUT PART=tests|perf|sanitize [REPS=10] bash benchmarks/decode_host_allocs/run.sh
. "$(dirname "$0")/../study_start.sh"
: "${OUT:?set OUT to the output folder}" "${PART:?set PART to tests, perf or sanitize}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
build() {  # name, then flashbuild's arguments
  local name=$1; shift
  python3 -m flashbuild --dtype fp16 --arch native "$@" > "$OUT/build-$name.log" 2>&1 || echo "build $name failed"
}
if [ "$PART" = tests ]; then
  build kvcache --hdim 64,128 --direction splitkv --causal both --jobs 4 &
  build hopper-checks --hdim 64 --direction fwd,splitkv --causal off --no-local --no-softcap --jobs 3 &
  build ampere-checks --hdim 192 --direction splitkv --causal off --no-local --no-softcap --jobs 2 &
  build pairs --hdim 64 --direction splitkv --causal off --no-local --no-softcap --jobs 2 &
  python3 -m flashbuild --hdim 64 --dtype bf16 --arch native --direction splitkv --causal off --no-local --no-softcap \
    --jobs 2 > "$OUT/build-pairs-bf16.log" 2>&1 &
  build prefill --hdim 32,64,128 --direction fwd,splitkv --causal both --no-local --no-softcap --jobs 3 &
  wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log | cut -c1-160
  timeout $(( ${DEADLINE:-560} - ($(date +%s) - t0) )) python3 -m pytest -q -p no:cacheprovider -rfEs \
    tests/gpu/test_kvcache_gpu.py tests/gpu/test_kvcache_one_launch_gpu.py \
    tests/gpu/test_kvcache_decode_pairs_gpu.py tests/gpu/test_kvcache_index_checks_gpu.py \
    tests/gpu/test_graph_capture_gpu.py tests/gpu/test_kvcache_prefill_gpu.py > "$OUT/tests.txt" 2>&1
  echo "== tests rc $? $(at)"; tail -n 12 "$OUT/tests.txt" | cut -c1-240
  exit 0
fi
if [ "$PART" = sanitize ]; then
  build kvcache --hdim 64,128 --direction splitkv --causal both --jobs 5 &
  build hopper-checks --hdim 64 --direction fwd,splitkv --causal off --no-local --no-softcap --jobs 4 &
  build ampere-checks --hdim 192 --direction splitkv --causal off --no-local --no-softcap --jobs 4 &
  build pairs --hdim 64 --direction splitkv --causal off --no-local --no-softcap --jobs 3 &
  wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log | cut -c1-160
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rfEs tests/gpu/test_kvcache_index_checks_gpu.py \
    -k touch_no_memory > "$OUT/index-checks-memcheck.txt" 2>&1
  echo "== index checks under memcheck rc $? $(at)"; tail -n 4 "$OUT/index-checks-memcheck.txt" | cut -c1-200
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    python3 benchmarks/decode_paired_heads/sanitize.py --bad > "$OUT/pairs-memcheck.txt" 2>&1
  echo "== pairs under memcheck rc $? $(at)"; grep -E "ERROR SUMMARY|no InvalidIndexError" "$OUT/pairs-memcheck.txt"
  timeout $(( ${DEADLINE:-570} - ($(date +%s) - t0) )) compute-sanitizer --tool memcheck --error-exitcode 9 \
    --print-limit 20 python3 -m pytest -q -p no:cacheprovider -x tests/gpu/test_kvcache_host_path_gpu.py \
    -k "matches_the_reference and 128" > "$OUT/host-path-memcheck.txt" 2>&1
  echo "== host-path tests under memcheck rc $? $(at)"
  grep -E "ERROR SUMMARY|passed|failed" "$OUT/host-path-memcheck.txt"
  exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/flashinfer/*.whl 2>&1 | tail -2
build ours --hdim 64,128 --direction splitkv --causal off --no-local --no-softcap --jobs 8 &
for h in 64 128; do
  for tc in "" --tensor-cores; do
    MAX_JOBS=4 timeout 330 python3 benchmarks/decode_flashinfer/prewarm.py --hdim $h $tc \
      > "/tmp/prewarm-$h$tc.txt" 2>&1 &
  done
done
wait; echo "== builds and FlashInfer's compiles $(at)"
tail -qn 1 /tmp/prewarm-*.txt > "$OUT/prewarm.txt"; tail -qn 1 "$OUT"/build-*.log "$OUT/prewarm.txt" | cut -c1-160
timeout 60 python3 benchmarks/decode/host_overhead.py --hdim 128 --build-hdims 64,128 --calls 2000 --rounds 3 \
  --flashinfer --profile "$OUT" > "$OUT/host_overhead.txt" 2>&1
echo "== host_overhead rc $? $(at)"
timeout 240 python3 benchmarks/decode/decode_table.py --reps "${REPS:-10}" --skip-no-idx --paths "" --flashinfer \
  --flashinfer-page 16 --json "$OUT/table.json" > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"
cut -c1-200 "$OUT/host_overhead.txt" | grep "^|"
cat "$OUT/table.txt"
