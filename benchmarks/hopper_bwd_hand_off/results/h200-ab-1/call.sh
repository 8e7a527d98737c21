#!/bin/bash
# Issue 46, the A/B call of this study (2026-11-28 about 19:50 UTC, an nvidia-h200 machine, tree at b88f8cc: the
# knobs in, defaults as main's; A's hdim-64 and hdim-128 kernels SASS-identical to main's at d08d510, checked on
# the dev machine). The worktree copied to /work/main/.device/w46b (benchmarks/ left out but for hopper_bwd/,
# hopper_bwd_fa3/ and hopper_bwd_hand_off/) with cutlass_include.tar.gz (tar -czf ... -C
# <cutlass_library>/source/include cute cutlass, nvidia-cutlass 4.2.0) beside it; run with carry [".device/w46b"],
# timeout_s 330 (wall 129.8 s):
cd .device/w46b && OUT=$OUT LIMIT=320 CHECK_TIMEOUT=220 BENCH_TIMEOUT=150 bash benchmarks/hopper_bwd_hand_off/run.sh --reps 20 --seqlens 1024,4096,16384
