#!/usr/bin/env bash
# Issue 45's batch-64 rows (README.md beside): the decode tile launched one CTA a tile (the hardware's dynamic deal,
# -DFLASHBUILD_SPLITKV_GRID_TILES=1) against the persistent grid (static deal), one nvidia-h200 call: both builds and
# FlashInfer's decode modules at once, then decode_table.py with the study build as its `ours study` column,
# at the rows whose tiles outnumber the grid's 264 slots. Carry `.whl` and `.device/flashinfer`. From the repo root
# after the wheel line:
#   OUT=$OUT [REPS=15] bash benchmarks/decode_tile_grid/run.sh
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,7p "$0" | cut -c3-; exit 0; fi
set -u
: "${OUT:?set OUT to the output folder}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$OUT"
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
flag=-DFLASHBUILD_SPLITKV_GRID_TILES=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/flashinfer/*.whl 2>&1 | tail -2
for f in "" "--nvcc-flag=$flag"; do
  python3 -m flashbuild --hdim 64,128 --dtype fp16 --arch native --direction splitkv --causal off --no-local \
    --no-softcap --jobs 6 $f > "$OUT/build${f:+-study}.log" 2>&1 &
done
for h in 64 128; do
  for tc in "" --tensor-cores; do
    MAX_JOBS=3 timeout 330 python3 benchmarks/decode_flashinfer/prewarm.py --hdim $h $tc > "/tmp/prewarm-$h$tc.txt" \
      2>&1 &
  done
done
wait; echo "== builds and FlashInfer's compiles $(at)"; tail -qn 1 "$OUT"/build*.log /tmp/prewarm*.txt | cut -c1-160
table() {  # name, then decode_table.py's row arguments
  local name=$1; shift
  timeout 200 python3 benchmarks/decode/decode_table.py --reps "${REPS:-15}" --skip-no-idx --paths "" --flashinfer \
    --flashinfer-page 16 --build-hdims 64,128 --study-nvcc-flag=$flag "$@" --json "$OUT/$name.json" \
    > "/tmp/$name.txt" 2>&1
  echo "== $name rc $? $(at)"; grep -E "^\||^HBM|^FlashInfer|study" "/tmp/$name.txt" | cut -c1-400
}
table b64 --hdim 128 --batch 64 --cache 4096,16384,65536
table b128 --hdim 128,64 --batch 128 --cache 4096,16384
