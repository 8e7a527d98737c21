#!/bin/bash
# Issue 19: BwdTraits::kDqFirst (dQ's product before dK's, its hand-off under dK's) against the default
# step order, hdim 64/128 fp16 causal both, timed in the same rounds with cuDNN; checks of both.
export PYTHONUNBUFFERED=1
V=h64_fp16_c0_f0,h64_fp16_c1_f0,h128_fp16_c0_f0,h128_fp16_c1_f0
S=h64_fp16_c0_f0_m128bulkfirst,h64_fp16_c1_f0_m128bulkfirst,h128_fp16_c0_f0_m64bulkfirst,h128_fp16_c1_f0_m64bulkfirst
LIMIT=560 BUILD_TIMEOUT=240 CHECK_TIMEOUT=130 BENCH_TIMEOUT=230 bash benchmarks/hopper_bwd/run.sh \
  --variants main,dqfirst --only $V,$S --reps 20 --seqlens 1024,4096,16384
