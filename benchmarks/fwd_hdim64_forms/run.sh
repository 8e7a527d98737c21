#!/usr/bin/env bash
# Issue 46: FA3's step forms, measured before at hdim 128, on hdim 64's three-warpgroup forward (README.md beside).
# One nvidia-h200 call, carry `.whl`, from the repo root after the wheel line:
#   OUT=$OUT bash benchmarks/fwd_hdim64_forms/run.sh
# 1. flashbuild test --shapes full on the plain hdim-128 forward (the 176-key line moved to 6k keys: that variant's
#    launch changed).
# 2. ../fwd_sass_fa3/ab.py --hdim 64, arms new (the tree), ov (the softmax under the own P V), lw (only the first
#    consumer warpgroup waits on K/V inside a step), fa3t (lw and no turn on a tile's first and last product),
#    causal and not, 1k / 4k / 16k, fp16 and bf16, in turns with SDPA cuDNN.
# PART=fix (after h200-1): the fa3t and lw arms again on the causal rows, with the skipping warpgroup's turn taken after
# its wait for the next K stage (kSkipTurnLate, kernels/hopper/fwd_mainloop.h); bitwise_equal in ab.json says whether
# each arm's outputs equal the tree's.
# PART=h128: the lead-waits forms again at hdim 128 (fwd_sass_fa3 call 4 left them "a lead for a longer A/B": its two
# calls disagreed at 4k-16k causal), 7 rounds, causal and not, 1k / 4k / 16k (non-causal 16k runs the 176-key kernel,
# whose default has both forms already: a control).
. "$(dirname "$0")/../study_start.sh"
if [ "${PART:-}" = fix ]; then
  python3 benchmarks/fwd_sass_fa3/ab.py --out "$OUT/fix" --hdim 64 --arms new,lw,fa3t --causal on \
    --seqlens 1024,2048,3072,4096,16384 --rounds 5 --reps 20 --budget 240 --jobs 16 --tol 4e-3 > "$OUT/fix.txt" 2>&1
  echo "== fix rc $? $(at)"; grep -E "^fwd_|budget|differ" "$OUT/fix.txt"
  python3 -c "import json; d = json.load(open('$OUT/fix/ab.json')); [print(r['variant'], r['seqlen'], r.get('bitwise_equal'), r.get('error', '')) for r in d['rows']]"
  exit 0
fi
if [ "${PART:-}" = h128 ]; then
  python3 benchmarks/fwd_sass_fa3/ab.py --out "$OUT/h128" --hdim 128 --arms new,lw,fa3t --rounds 7 --reps 20 \
    --budget 300 --jobs 16 --tol 4e-3 > "$OUT/h128.txt" 2>&1
  echo "== h128 rc $? $(at)"; grep -E "^fwd_|budget|differ" "$OUT/h128.txt"
  python3 -c "import json; d = json.load(open('$OUT/h128/ab.json')); [print(r['variant'], r['seqlen'], r.get('bitwise_equal'), r.get('error', '')) for r in d['rows']]"
  exit 0
fi
timeout 200 python3 -m flashbuild test --hdim 128 --dtype fp16,bf16 --arch native --direction fwd --causal off \
  --no-local --no-softcap --shapes full --jobs 16 > "$OUT/test.txt" 2>&1
echo "== test rc $? $(at)"; tail -n 4 "$OUT/test.txt" | cut -c1-240
python3 benchmarks/fwd_sass_fa3/ab.py --out "$OUT/ab" --hdim 64 --arms new,ov,lw,fa3t --rounds 5 --reps 20 \
  --budget "${BUDGET:-200}" --jobs 16 --tol 4e-3 > "$OUT/ab.txt" 2>&1
echo "== ab rc $? $(at)"; grep -E "^fwd_|budget|differ" "$OUT/ab.txt"
