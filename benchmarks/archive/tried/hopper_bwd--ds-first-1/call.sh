#!/bin/bash
# Issue 19: BwdTraits::kDsFirst (dS^T stored before dV's product is issued) against each head dim's default step,
# hdim 64/128 fp16 causal both, in the same rounds with cuDNN; checks of both.
export PYTHONUNBUFFERED=1
V=h64_fp16_c0_f0,h64_fp16_c1_f0,h128_fp16_c0_f0,h128_fp16_c1_f0
S=h64_fp16_c0_f0_m128bulkdsfirst,h64_fp16_c1_f0_m128bulkdsfirst,h128_fp16_c0_f0_m64bulkdsfirst,h128_fp16_c1_f0_m64bulkdsfirst
LIMIT=540 BUILD_TIMEOUT=220 CHECK_TIMEOUT=130 BENCH_TIMEOUT=220 bash benchmarks/hopper_bwd/run.sh \
  --variants main,dsfirst --only $V,$S --reps 20 --seqlens 1024,4096,16384
