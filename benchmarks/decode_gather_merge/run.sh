#!/usr/bin/env bash
# Issue 45's batch-1 rows (README.md beside): the cluster merge shared out over the splits' CTAs (each keeps its own
# values; clusters of up to 16 splits; -DFLASHBUILD_SPLITKV_GATHER_MERGE=1) against the default (clusters of up to 2
# splits at hdim 64, 4 at 128, else the merge through L2), one nvidia-h200 call: the builds at once, the one-launch and
# past-the-slots GPU tests on the study build (bit-equal to the other merges, the fp32 reference), then decode_table.py
# with the study build as its `ours study` column at batch 1 and 8. Carry `.whl`. From the repo root after the wheel
# line:
#   OUT=$OUT [REPS=15] bash benchmarks/decode_gather_merge/run.sh     # at 64dfffa, which has the study form
. "$(dirname "$0")/../study_start.sh"
flag=-DFLASHBUILD_SPLITKV_GATHER_MERGE=1
grep -q FLASHBUILD_SPLITKV_GATHER_MERGE kernels/hopper/*.h ||
  { echo "this tree has no $flag (taken out after 64dfffa): run this script at 64dfffa"; exit 2; }
build() {  # name, then flashbuild's arguments
  local name=$1; shift
  python3 -m flashbuild --dtype fp16 --arch native --hdim 64,128 --direction splitkv "$@" > "$OUT/build-$name.log" 2>&1 ||
    echo "build $name failed"
}
build ours --causal off --no-local --no-softcap --jobs 4 &
build study --causal off --no-local --no-softcap --jobs 4 "--nvcc-flag=$flag" &
build study-tests --causal both --jobs 8 "--nvcc-flag=$flag" &
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log | cut -c1-160
FLASHBUILD_TEST_NVCC_FLAGS=$flag timeout 240 python3 -m pytest -q -p no:cacheprovider -rfEs -x \
  tests/gpu/test_kvcache_one_launch_gpu.py tests/gpu/test_kvcache_decode_grid_gpu.py > "$OUT/tests.txt" 2>&1
echo "== tests on the study build rc $? $(at)"; tail -n 6 "$OUT/tests.txt" | cut -c1-300
timeout 240 python3 benchmarks/decode/decode_table.py --reps "${REPS:-15}" --skip-no-idx --paths "" \
  --build-hdims 64,128 --study-nvcc-flag=$flag --hdim 128,64 --batch 1,8 --cache 4096,16384,65536 \
  --json "$OUT/table.json" > /tmp/table.txt 2>&1
echo "== table rc $? $(at)"; grep -E "^\||^HBM|study" /tmp/table.txt | cut -c1-400
