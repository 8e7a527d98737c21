#!/usr/bin/env bash
# Cold vs warm compiler cache for one CI cell (configs/ci.toml: smoke-sm80, one real forward TU),
# with ccache (a fresh build dir at another path) and sccache (a fresh build dir at the same path).
# Usage: benchmarks/ci_cache/run.sh WORKDIR   (WORKDIR beside the checkout, e.g. /work/ci-cache-bench:
# ccache's base dir defaults to the common parent of build dir and kernel tree, never /)
set -euo pipefail
work=${1:?give a work dir beside the checkout}
cell=${CELL:-smoke-sm80}
rm -rf "$work" && mkdir -p "$work"
export FLASHBUILD_CACHE_DIR=$work/fbcache CCACHE_DIR=$work/ccache SCCACHE_DIR=$work/sccache
export SCCACHE_SERVER_PORT=${SCCACHE_SERVER_PORT:-4231} SCCACHE_IDLE_TIMEOUT=600
unset FLASHBUILD_LAUNCHER CCACHE_BASEDIR CCACHE_NOHASHDIR
build() {  # build LAUNCHER BUILD_DIR LABEL
  local start end
  start=$(date +%s.%N)
  python3 -m flashbuild build --config configs/ci.toml --cell "$cell" --compile-only --jobs 1 \
      --launcher "$1" --build-dir "$2" >/dev/null 2>"$work/$3.log"
  end=$(date +%s.%N)
  printf '%s\t%s\t%.1f\n' "$3" "$1" "$(echo "$end - $start" | bc)"
}
echo -e "run\tlauncher\twall_s"
build ccache "$work/ccache-cold" ccache-cold
build ccache "$work/ccache-warm" ccache-warm
ccache --print-stats | grep -E '^(cache_miss|direct_cache_hit|preprocessed_cache_hit)\s' | sed 's/^/# ccache /'
sccache --start-server >/dev/null 2>&1
build sccache "$work/sccache-build" sccache-cold
rm -rf "$work/sccache-build"
build sccache "$work/sccache-build" sccache-warm-same-path
build sccache "$work/sccache-other" sccache-warm-other-path
sccache --show-stats --stats-format json | python3 -c "import json,sys; s=json.load(sys.stdin)['stats']; print('# sccache hits', s['cache_hits']['counts']); print('# sccache misses', s['cache_misses']['counts'])"
sccache --stop-server >/dev/null 2>&1 || true
build "" "$work/nolauncher" no-launcher
