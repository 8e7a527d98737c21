#!/bin/bash
# The staged dK/dV epilogue (-DFLASHBUILD_HOPPER_BWD_DKV_TMA=1, kernels/hopper/bwd_epilogue.h) against the tree's
# defaults at hdim 64 and 128, one call on the H200: both builds side by side,
# `flashbuild test --shapes full` of the dkvtma build, then ab.py (bitwise checks against base in deterministic mode, the
# rows in turns with SDPA cuDNN). Logs and results.tgz under $OUT, the table last. From the tree's root on the GPU
# host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [BUDGET=220] bash benchmarks/hopper_bwd_dkv_tma/run.sh [ab.py options]
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,7p "$0" | cut -c3-; exit 0; fi
BUDGET=${BUDGET:-220} exec bash benchmarks/hopper_bwd_uniform/ab_call.sh hopper_bwd_dkv_tma dkvtma 8 "$@"  # the call's steps: that script
