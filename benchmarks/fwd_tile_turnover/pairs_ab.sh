#!/bin/bash
# FLASHBUILD_HOPPER_FWD_PAIRS=short (the default) against =all, one build, in turns in one process
# (pairs_ab.py): hdim 64, 128, 256, fp16 and bf16, causal 1k/4k/16k; a short table last, JSON under OUT.
# About 200 s on the H200 (build ~90 s with 16 jobs; BUDGET, s after the build, 90: no row starts past it).
# From the tree's root on the GPU host (PYTHONPATH and FLASHBUILD_CACHE_DIR as the call sets them):
#   OUT=$OUT bash benchmarks/fwd_tile_turnover/pairs_ab.sh [extra pairs_ab.py options, e.g. --settings short,all,off]
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/pairs_ab_out}; mkdir -p "$OUT"; BUDGET=${BUDGET:-90}
t0=$(date +%s)
timeout 280 python3 benchmarks/fwd_tile_turnover/pairs_ab.py --out "$OUT" --budget "$BUDGET" "$@" 2>&1 | tee "$OUT/pairs_ab.txt"
echo "rc ${PIPESTATUS[0]}, wall $(( $(date +%s) - t0 )) s"
