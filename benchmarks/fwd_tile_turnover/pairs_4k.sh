#!/bin/bash
# Pairs of causal query blocks from 4k (README.md, "Pairs from 4k"): the tree as it was then (kPairMaxBlocks 16: from
# 4k longest first alone; 32 since, README.md "The GPU runs since") against the same tree built with -DFLASHBUILD_HOPPER_FWD_PAIR_MAX_BLOCKS=128 (pairs up to
# 16k at 128-row tiles), hdim 128 fp16 causal, `flashbuild bench` at 4k and 16k in turns (cuDNN beside), on the
# H200 in one short call. From the tree's root there:
#   OUT=$OUT bash benchmarks/fwd_tile_turnover/pairs_4k.sh      # BUDGET (s, 38): no round starts after it
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/tmp/site:$PWD
OUT=${OUT:-/tmp/pairs4k_out}; mkdir -p "$OUT"; BUDGET=${BUDGET:-38}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
S="--hdim 128 --dtype fp16 --arch sm90 --direction fwd --causal on --no-local --no-softcap"
P="--nvcc-flag=-DFLASHBUILD_HOPPER_FWD_PAIR_MAX_BLOCKS=128"
fb_kept() { FLASHBUILD_CACHE_DIR=/tmp/fbc_kept timeout "$1" python3 -m flashbuild "${@:2}" $S; }
fb_pairs() { FLASHBUILD_CACHE_DIR=/tmp/fbc_pairs timeout "$1" python3 -m flashbuild "${@:2}" $S $P; }
fb_kept 60 build -j 8 > "$OUT/build-kept.txt" 2>&1 & fb_pairs 60 build -j 8 > "$OUT/build-pairs.txt" 2>&1 & wait
echo "== built $(at)"
for r in 1 2 3; do
  [ $(( $(date +%s) - t0 )) -gt "$BUDGET" ] && { echo "== budget: round $r not started"; break; }
  for v in kept pairs; do
    fb_$v 30 bench --seqlens 4096,16384 --reps 10 --json "$OUT/bench-$v-$r.json" > "$OUT/bench-$v-$r.txt" 2>&1
    echo "== bench $v r$r rc $? $(at)"; done; done
python3 benchmarks/fwd_softmax_overlap/rows.py "$OUT" kept pairs | tee "$OUT/rows.txt"
