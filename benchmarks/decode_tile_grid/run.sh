#!/usr/bin/env bash
# Issue 45's batch-64 rows (README.md beside), one nvidia-h200 call a part. Carry `.whl` (and `.device/flashinfer` for
# ab). From the repo root after the wheel line:
#   OUT=$OUT PART=ab|tests|more|sweep [REPS=15] bash benchmarks/decode_tile_grid/run.sh
# ab (at commit dc47dbc, which has the study define): the decode tile launched one CTA a tile
# (-DFLASHBUILD_SPLITKV_GRID_TILES=1) against the persistent grid, both builds and FlashInfer's decode modules at once,
# then decode_table.py with the study build as its `ours study` column at the rows whose tiles outnumber the 264 slots.
# tests: the builds the KV-cache GPU files load, then those files (with the calls past the slots and the host path).
# more: the hostile, API, host-binding, pairs and kept-descriptor GPU files, then flashbuild test's split-KV checks
# (hdim 64 and 128, fp16 and bf16, full shapes).
# sweep: forced split counts (16, 32, 33) beside the binding's at batch 1 (graph-replayed).
. "$(dirname "$0")/../study_start.sh"
: "${OUT:?set OUT to the output folder}" "${PART:?set PART to ab, tests, more or sweep}"
build() {  # name, then flashbuild's arguments
  local name=$1; shift
  python3 -m flashbuild --dtype fp16 --arch native "$@" > "$OUT/build-$name.log" 2>&1 || echo "build $name failed"
}
table() {  # name, then decode_table.py's arguments
  local name=$1; shift
  timeout 200 python3 benchmarks/decode/decode_table.py --reps "${REPS:-15}" --skip-no-idx --paths "" \
    --build-hdims 64,128 "$@" --json "$OUT/$name.json" > "/tmp/$name.txt" 2>&1
  echo "== $name rc $? $(at)"; grep -E "^\||^HBM|^FlashInfer|study" "/tmp/$name.txt" | cut -c1-400
}
if [ "$PART" = tests ]; then
  build kvcache --hdim 64,128 --direction splitkv --causal both --jobs 6 &
  build hopper-checks --hdim 64 --direction fwd,splitkv --causal off --no-local --no-softcap --jobs 4 &
  build ampere-checks --hdim 192 --direction splitkv --causal off --no-local --no-softcap --jobs 3 &
  build prefill --hdim 32,64,128 --direction fwd,splitkv --causal both --no-local --no-softcap --jobs 3 &
  wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log | cut -c1-160
  timeout $(( ${DEADLINE:-560} - ($(date +%s) - t0) )) python3 -m pytest -q -p no:cacheprovider -rfEs \
    tests/gpu/test_kvcache_decode_grid_gpu.py tests/gpu/test_kvcache_gpu.py tests/gpu/test_kvcache_one_launch_gpu.py \
    tests/gpu/test_kvcache_decode_tile_gpu.py tests/gpu/test_kvcache_index_checks_gpu.py \
    tests/gpu/test_graph_capture_gpu.py tests/gpu/test_kvcache_prefill_gpu.py tests/gpu/test_kvcache_host_path_gpu.py \
    > "$OUT/tests.txt" 2>&1
  echo "== tests rc $? $(at)"; tail -n 12 "$OUT/tests.txt" | cut -c1-240
  exit 0
fi
if [ "$PART" = more ]; then
  build api --hdim 64 --direction fwd,bwd,splitkv --causal both --jobs 8 &
  build fwd --hdim 64 --direction fwd --causal both --no-local --no-softcap --jobs 2 &
  build causal --hdim 64 --direction splitkv --causal on --jobs 2 &
  build kvcache --hdim 64,128 --direction splitkv --causal both --jobs 2 &
  build pairs --hdim 64 --direction splitkv --causal off --no-local --no-softcap --jobs 1 &
  python3 -m flashbuild --hdim 64 --dtype bf16 --arch native --direction splitkv --causal off --no-local --no-softcap \
    --jobs 1 > "$OUT/build-pairs-bf16.log" 2>&1 &
  wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log | cut -c1-160
  timeout 200 python3 -m pytest -q -p no:cacheprovider -rfEs tests/gpu/test_hostile_inputs_gpu.py \
    tests/gpu/test_api_gpu.py tests/gpu/test_host_binding_gpu.py tests/gpu/test_kvcache_decode_pairs_gpu.py \
    tests/gpu/test_kvcache_descriptor_cache_gpu.py > /tmp/tests-more.txt 2>&1
  echo "== GPU files rc $? $(at)"; tail -n 8 /tmp/tests-more.txt | cut -c1-240
  timeout $(( ${DEADLINE:-570} - ($(date +%s) - t0) )) python3 -m flashbuild test --hdim 64,128 --dtype fp16,bf16 \
    --arch native --direction splitkv --shapes full > /tmp/test-splitkv.txt 2>&1
  echo "== flashbuild test rc $? $(at)"; tail -n 6 /tmp/test-splitkv.txt | cut -c1-240
  exit 0
fi
build ours --hdim 64,128 --direction splitkv --causal off --no-local --no-softcap --jobs 8 &
if [ "$PART" = sweep ]; then
  wait; echo "== build $(at)"
  table sweep --hdim 64,128 --batch 1 --cache 16384,65536 --sweep-splits 16,32,33
  exit 0
fi
flag=-DFLASHBUILD_SPLITKV_GRID_TILES=1
grep -q FLASHBUILD_SPLITKV_GRID_TILES kernels/hopper/splitkv_decode_launch.h ||
  { echo "PART=ab: this tree has no $flag (it is the default since dc47dbc's successor): run it at dc47dbc"; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/flashinfer/*.whl 2>&1 | tail -2
build study --hdim 64,128 --direction splitkv --causal off --no-local --no-softcap --jobs 8 "--nvcc-flag=$flag" &
for h in 64 128; do
  for tc in "" --tensor-cores; do
    MAX_JOBS=3 timeout 330 python3 benchmarks/decode_flashinfer/prewarm.py --hdim $h $tc > "/tmp/prewarm-$h$tc.txt" \
      2>&1 &
  done
done
wait; echo "== builds and FlashInfer's compiles $(at)"; tail -qn 1 "$OUT"/build*.log /tmp/prewarm*.txt | cut -c1-160
table b64 --flashinfer --flashinfer-page 16 --study-nvcc-flag=$flag --hdim 128 --batch 64 --cache 4096,16384,65536
table b128 --flashinfer --flashinfer-page 16 --study-nvcc-flag=$flag --hdim 128,64 --batch 128 --cache 4096,16384
