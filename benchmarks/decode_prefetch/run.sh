#!/usr/bin/env bash
# Issue 45's small-batch rows (README.md beside): the decode tile's first K/V boxes asked of L2 before
# griddepcontrol.wait (-DFLASHBUILD_SPLITKV_PREFETCH=N boxes of each) against the default, one nvidia-h200 call: the
# builds at once, then decode_table.py with a study build as its `ours study` column: N=1 at batch 1 and 8, N=3 at
# batch 1, 8 and 64, and N=3 with every call released late (FLASHBUILD_SPLITKV_PATH=pdl-late exported: the next call's
# CTAs start once this one's tiles are computed) at batch 1 and 8. Carry `.whl`. From the repo root after the wheel
# line (at 14566a3, which has the study form):
#   OUT=$OUT [REPS=15] bash benchmarks/decode_prefetch/run.sh
. "$(dirname "$0")/../study_start.sh"
grep -q FLASHBUILD_SPLITKV_PREFETCH kernels/hopper/*.h ||
  { echo "this tree has no -DFLASHBUILD_SPLITKV_PREFETCH: run this script at 14566a3"; exit 2; }
build() {  # name, then flashbuild's arguments
  python3 -m flashbuild --dtype fp16 --arch native --hdim 64,128 --direction splitkv --causal off --no-local \
    --no-softcap --jobs 5 "${@:2}" > "$OUT/build-$1.log" 2>&1 || echo "build $1 failed"
}
build ours & build n1 --nvcc-flag=-DFLASHBUILD_SPLITKV_PREFETCH=1 & build n3 --nvcc-flag=-DFLASHBUILD_SPLITKV_PREFETCH=3 &
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log | cut -c1-160
table() {  # name, N, batches
  timeout 200 python3 benchmarks/decode/decode_table.py --reps "${REPS:-15}" --skip-no-idx --paths "" \
    --build-hdims 64,128 --study-nvcc-flag=-DFLASHBUILD_SPLITKV_PREFETCH=$2 --hdim 128,64 --batch "$3" \
    --cache 4096,16384,65536 --json "$OUT/$1.json" > "/tmp/$1.txt" 2>&1
  echo "== $1 rc $? $(at)"; grep -E "^\||^HBM|study" "/tmp/$1.txt" | cut -c1-300
}
table n1 1 1,8
table n3 3 1,8,64
FLASHBUILD_SPLITKV_PATH=pdl-late table n3-late 3 1,8
