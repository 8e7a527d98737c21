#!/usr/bin/env bash
# The split-KV producer's first V tile of a tile issued before its wait for the consumers' sQ (README.md beside;
# -DFLASHBUILD_HOPPER_V_BEFORE_Q=1, off by default) against the default, one nvidia-h200 call: both builds, then issue
# 45's decode table three times with the study build as a column (`ours study`, timed in turns; its outputs compared
# with the default's). From the repo root after the wheel line:
#   OUT=$OUT [REPS=20] bash benchmarks/decode_v_before_q/run.sh
. "$(dirname "$0")/../study_start.sh"
if ! grep -q FLASHBUILD_HOPPER_V_BEFORE_Q kernels/hopper/fwd_mainloop.h; then
  echo "this tree has no -DFLASHBUILD_HOPPER_V_BEFORE_Q form (taken out after its run): check out a566e13 to repeat it" >&2
  exit 2
fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$OUT"
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
FLAG=-DFLASHBUILD_HOPPER_V_BEFORE_Q=1
S="--hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local --no-softcap"
python3 -m flashbuild $S --jobs 8 > "$OUT/builds.txt" 2>&1 &
python3 -m flashbuild $S --jobs 8 --nvcc-flag=$FLAG > /tmp/build-study.txt 2>&1 &
wait; cat /tmp/build-study.txt >> "$OUT/builds.txt"; echo "== builds $(at)"
for i in 1 2 3; do
  timeout 150 python3 benchmarks/decode/decode_table.py --reps "${REPS:-20}" --skip-no-idx --paths "" \
    --study-nvcc-flag=$FLAG --json "$OUT/table-$i.json" > "$OUT/table-$i.txt" 2>&1
  echo "== table $i rc $? $(at)"
done
grep -h "^max |study" "$OUT"/table-*.txt | cut -c1-400
tail -n 19 "$OUT/table-3.txt"
