#!/usr/bin/env bash
# The split-KV's 64-row tile launched one CTA a tile (-DFLASHBUILD_SPLITKV_ROWS64_GRID_TILES=1, README.md beside)
# against its persistent grid, one nvidia-h200 call: both builds at once, then decode_table.py with the study build as
# its `ours study` column and FLASHBUILD_SPLITKV_TILE=rows64 exported (every decoding call on the 64-row tile), at the
# rows whose tiles outnumber the 264 slots. Carry `.whl`. From the repo root after the wheel line (at a4fc5f9, which has the
# study form):
#   OUT=$OUT [REPS=15] bash benchmarks/decode_rows64_grid/run.sh
. "$(dirname "$0")/../study_start.sh"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 FLASHBUILD_SPLITKV_TILE=rows64
flag=-DFLASHBUILD_SPLITKV_ROWS64_GRID_TILES=1
grep -q FLASHBUILD_SPLITKV_ROWS64_GRID_TILES kernels/hopper/fwd_launch.h ||
  { echo "this tree has no $flag: run this script at a4fc5f9"; exit 2; }
build() {  # name, then flashbuild's arguments
  python3 -m flashbuild --dtype fp16 --arch native --hdim 64,128 --direction splitkv --causal off --no-local \
    --no-softcap --jobs 8 "${@:2}" > "$OUT/build-$1.log" 2>&1 || echo "build $1 failed"
}
build ours & build study "--nvcc-flag=$flag" &
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.log | cut -c1-160
table() {  # name, then decode_table.py's row arguments
  timeout 240 python3 benchmarks/decode/decode_table.py --reps "${REPS:-15}" --skip-no-idx --paths "" \
    --build-hdims 64,128 --study-nvcc-flag=$flag --json "$OUT/$1.json" "${@:2}" > "/tmp/$1.txt" 2>&1
  echo "== $1 rc $? $(at)"; grep -E "^\||^HBM|study" "/tmp/$1.txt" | cut -c1-300
}
table b64 --hdim 128,64 --batch 64 --cache 4096,16384,65536
table b128 --hdim 128,64 --batch 128 --cache 4096,16384
