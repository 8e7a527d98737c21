#!/bin/bash
# dV early (kDvEarly, commit 12916e5: it lost and left main; run this from that checkout) against the tree's
# defaults at hdim 128, one call on the H200: both builds side by side,
# `flashbuild test --shapes full` of the dve build, then ab.py (bitwise checks against base in deterministic mode, the
# rows in turns with SDPA cuDNN). Logs and results.tgz under $OUT, the table last. From the tree's root on the GPU
# host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [BUDGET=220] bash benchmarks/bwd_sass_fa3/run.sh [ab.py options]
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,7p "$0" | cut -c3-; exit 0; fi
BUDGET=${BUDGET:-220} exec bash benchmarks/hopper_bwd_uniform/ab_call.sh bwd_sass_fa3 dve 8 "$@"  # the call's steps: that script
