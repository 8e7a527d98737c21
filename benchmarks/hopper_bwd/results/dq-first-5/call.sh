#!/bin/bash
# Issue 19: hdim 96's step order, the default (dQ first) against the old one in the same rounds with cuDNN; checks of both.
export PYTHONUNBUFFERED=1
LIMIT=500 BUILD_TIMEOUT=200 CHECK_TIMEOUT=120 BENCH_TIMEOUT=200 bash benchmarks/hopper_bwd/run.sh \
  --variants dqorder96 --reps 20 --seqlens 1024,4096,16384
