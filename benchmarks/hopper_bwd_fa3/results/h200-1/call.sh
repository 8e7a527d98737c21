#!/bin/bash
# Issue 46, the one device call of this study (2026-11-28 about 14:58 UTC, an nvidia-h200 machine, tree at 2313526):
# 16 TUs (the baseline A and the candidates of study.py's PLAN, fp16; two bf16 check-only variants) built on 16
# cores, checked, then timed in turns with SDPA flash and cuDNN. Staged as BRIEF.md says: the worktree copied to
# /work/main/.device/w46 (benchmarks/ left out but for hopper_bwd/hopper_bwd.py and hopper_bwd_fa3/), with
# cutlass_include.tar.gz (tar -czf ... -C <cutlass_library>/source/include cute cutlass, nvidia-cutlass 4.2.0)
# beside it; run with carry [".device/w46"], timeout_s 385:
cd .device/w46 && OUT=$OUT LIMIT=360 CHECK_TIMEOUT=230 BENCH_TIMEOUT=200 bash benchmarks/hopper_bwd_fa3/run.sh --reps 20 --seqlens 1024,4096,16384
