#!/usr/bin/env bash
# Issue 45's batch-1 rows (README.md beside): -DFLASHBUILD_SPLITKV_TAIL_PREFETCH=R (a producer done with its tile,
# while no split of the row has finished, asks L2 for the last R key blocks of the row's other splits) against the
# default, one nvidia-h200 call: the builds at once, the one-launch and KV-cache GPU tests on the R=2 build
# (FLASHBUILD_TEST_NVCC_FLAGS), then decode_table.py with each study build as its `ours study` column, graph-replayed
# and eager, every call on another copy of the cache. Carry `.whl`. From the repo root after the wheel line (at the
# commit that has the study form, 33bd4cd):
#   OUT=$OUT [REPS=15] [TAILS="2 4"] [BATCH=1,8] [CACHE=16384,65536] bash benchmarks/decode_tail_prefetch/run.sh
. "$(dirname "$0")/../study_start.sh"
grep -q FLASHBUILD_SPLITKV_TAIL_PREFETCH kernels/hopper/*.h ||
  { echo "this tree has no -DFLASHBUILD_SPLITKV_TAIL_PREFETCH: run this script at the study's commit"; exit 2; }
TAILS=${TAILS:-2 4}
build() {  # name, then flashbuild's arguments
  python3 -m flashbuild --dtype fp16 --arch native --hdim 64,128 --direction splitkv --causal off --no-local \
    --no-softcap --jobs 4 "${@:2}" > "$OUT/build-$1.log" 2>&1 || echo "build $1 failed"
}
build ours &
for r in $TAILS; do build "t$r" --nvcc-flag=-DFLASHBUILD_SPLITKV_TAIL_PREFETCH=$r & done
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log | cut -c1-160
first=${TAILS%% *}
FLASHBUILD_TEST_NVCC_FLAGS=-DFLASHBUILD_SPLITKV_TAIL_PREFETCH=$first timeout 240 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_kvcache_one_launch_gpu.py tests/gpu/test_kvcache_gpu.py > "$OUT/tests-t$first.txt" 2>&1
echo "== tests (R=$first) rc $? $(at): $(tail -1 "$OUT/tests-t$first.txt")"
for r in $TAILS; do
  timeout 200 python3 benchmarks/decode/decode_table.py --reps "${REPS:-15}" --skip-no-idx --paths "" \
    --build-hdims 64,128 --study-nvcc-flag=-DFLASHBUILD_SPLITKV_TAIL_PREFETCH=$r --hdim 64,128 --batch "${BATCH:-1,8}" \
    --cache "${CACHE:-16384,65536}" --json "$OUT/t$r.json" > "$OUT/t$r.txt" 2>&1
  echo "== t$r rc $? $(at)"; grep -E "^\||^HBM" "$OUT/t$r.txt" | cut -c1-320
done
