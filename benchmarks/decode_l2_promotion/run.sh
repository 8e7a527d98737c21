#!/usr/bin/env bash
# One nvidia-h200 call (README.md beside), on the tree of 59eeee1 (main no longer has the switch): the split-KV
# build (hdim 64 and 128), the decode tile's outputs with FLASHBUILD_SPLITKV_L2=256 against the default bit for bit
# (same.py), then issue 45's decode table with l2=256 as a column beside the default. Results under $OUT, the table
# last. From the repo root after the wheel line:
#   OUT=$OUT [REPS=10] bash benchmarks/decode_l2_promotion/run.sh
. "$(dirname "$0")/../study_start.sh"
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 16 > "$OUT/build.log" 2>&1
echo "== build rc $? $(at)"
timeout 60 python3 benchmarks/decode_l2_promotion/same.py > "$OUT/same.txt" 2>&1
rc=$?; echo "== same rc $rc $(at)"; tail -n 8 "$OUT/same.txt"; [ "$rc" -eq 0 ] || exit 1
timeout 200 python3 benchmarks/decode/decode_table.py --reps "${REPS:-10}" --skip-no-idx --paths l2=256 \
  --json "$OUT/table.json" > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"; tail -n 20 "$OUT/table.txt"
