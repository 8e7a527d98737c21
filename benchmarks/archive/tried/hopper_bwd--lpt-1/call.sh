#!/bin/bash
# Issue 19: causal grids longest first across heads (BwdTraits::kLongestFirst, the default now) against the grid's
# own order, hdim 64/128/256 fp16, in the same rounds with cuDNN; checks of both.
export PYTHONUNBUFFERED=1
LIMIT=540 BUILD_TIMEOUT=220 CHECK_TIMEOUT=130 BENCH_TIMEOUT=200 bash benchmarks/hopper_bwd/run.sh \
  --variants lpt --reps 20 --seqlens 1024,4096,16384
