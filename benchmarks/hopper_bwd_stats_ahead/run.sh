#!/bin/bash
# The backward producer's LSE and dsum one query block ahead (-DFLASHBUILD_HOPPER_BWD_STATS_AHEAD=1 `ahead`) against
# the tree's defaults at hdim 64 and 128, one call on the H200: ab.py's two builds side by side (fp16), `flashbuild test
# --shapes full` of ahead's build (causal and not), then ab.py (ahead bitwise against base in deterministic mode, then
# the rows in turns with SDPA cuDNN). Logs and results.tgz under $OUT, the table last.
# From the tree's root on the GPU host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [BUDGET=300] bash benchmarks/hopper_bwd_stats_ahead/run.sh [ab.py options]
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,7p "$0" | cut -c3-; exit 0; fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if ! grep -q STATS_AHEAD "$ROOT/kernels/hopper/bwd_producer.h"; then
  echo "run.sh: this tree ($ROOT) has no -DFLASHBUILD_HOPPER_BWD_STATS_AHEAD form: it made no gain in call h200-1" \
       "(benchmarks/hopper_bwd_stats_ahead/README.md) and was taken out of main. Run it from the last commit that" \
       "has it: git worktree add /tmp/sa 9c47a5c && cd /tmp/sa && OUT=\$OUT BUDGET=300 bash benchmarks/hopper_bwd_stats_ahead/run.sh" >&2
  exit 2
fi
exec bash "$ROOT/benchmarks/hopper_bwd_uniform/ab_call.sh" hopper_bwd_stats_ahead "ahead" 8 "$@"
