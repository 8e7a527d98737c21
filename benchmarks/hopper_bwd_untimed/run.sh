#!/bin/bash
# ab.py's arms against the tree's defaults at one head dim (HDIMS, ARMS: ab.py --help), one call on the H200: the
# builds side by side, `flashbuild test --shapes full` of each arm's build, then ab.py (bitwise checks against base in
# deterministic mode, the rows in turns with SDPA cuDNN). Logs and results.tgz under $OUT, the table last. From the
# tree's root on the GPU host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [BUDGET=220] HDIMS=96 ARMS=base,halves bash benchmarks/hopper_bwd_untimed/run.sh [ab.py options]
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
ARMS=${ARMS:-base,halves,tmaf,ht}; BUDGET=${BUDGET:-220} exec bash benchmarks/hopper_bwd_uniform/ab_call.sh hopper_bwd_untimed "$(echo "${ARMS#base}" | tr , " ")" 8 "$@"  # the call's steps: that script
