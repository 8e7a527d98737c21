#!/bin/bash
# The exponentials under dP^T's product (-DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP=1 `pin`, =3 `half`) against the tree's
# defaults at hdim 128, one call on the H200: ab.py's builds side by side (base and the two forms, fp16 and bf16),
# `flashbuild test --shapes full` of each form's fp16 build (causal and not), then ab.py (each form bitwise against base
# in deterministic mode, then the rows in turns with SDPA cuDNN). Logs and results.tgz under $OUT, the table last.
# From the tree's root on the GPU host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [BUDGET=300] bash benchmarks/hopper_bwd_exp_under_dp/run.sh [ab.py options]
# The form lost in call h200-1 and left main (README.md): run this from the last commit that has it, c5aa03e; on a
# tree without kernels/hopper/bwd_exp_under_dp.h it stops at once (exit 2) and says so.
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,9p "$0" | cut -c3-; exit 0; fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -f "$ROOT/kernels/hopper/bwd_exp_under_dp.h" ]; then
  echo "run.sh: this tree ($ROOT) has no exponentials-under-dP^T form (kernels/hopper/bwd_exp_under_dp.h): it lost" \
       "in call h200-1 (benchmarks/hopper_bwd_exp_under_dp/README.md) and was taken out of main, so" \
       "-DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP would change nothing. Run it from the last commit that has it:" \
       "git worktree add /tmp/eud c5aa03e && cd /tmp/eud && OUT=\$OUT BUDGET=300 bash benchmarks/hopper_bwd_exp_under_dp/run.sh" >&2
  exit 2
fi
exec bash "$ROOT/benchmarks/hopper_bwd_uniform/ab_call.sh" hopper_bwd_exp_under_dp "pin half" 3 "$@"
