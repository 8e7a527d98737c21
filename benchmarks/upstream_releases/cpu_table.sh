#!/usr/bin/env bash
# The table of issue 44 on a machine without a GPU: for each tree, the profile and release flashbuild
# names it (no --profile), its dry-run plan, and one TU of it compiled (--compile-only, nvcc, one job).
# Trees are never committed: FA2 sdists via pip download, FA3 hopper/ via git archive (docs/fa3.md);
# pass their roots as arguments. FLASHBUILD_FA3_CUTLASS must name the CUTLASS a given FA3 tree pins.
# COMPILE=0 skips the compiles (minutes each).
set -euo pipefail
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-$(mktemp -d)}
for tree in "$@"; do
  echo "== $tree"
  python3 -m flashbuild profiles --source "$tree" | grep '^detected'
  python3 -m flashbuild --source "$tree" --hdim 64 --dtype fp16 --arch sm90 --dry-run | sed -n '1,3p'
  if [ "${COMPILE:-1}" = 1 ]; then
    if [ -d "$tree/hopper" ] && [ ! -d "$tree/csrc/flash_attn" ]; then   # FA3: the smallest forward kernel TU
      args=(--hdim 64 --dtype fp16 --arch sm90 --direction fwd --features none)
    else                                                                  # FA2: the smallest forward TU
      args=(--hdim 32 --dtype fp16 --arch sm80 --direction fwd --causal off --features none)
    fi
    /usr/bin/time -f "wall %e s, peak RSS %M KB" \
      python3 -m flashbuild --source "$tree" "${args[@]}" --compile-only --jobs 1 2>&1 | tail -6
  fi
done
