#!/bin/bash
# The SASS of the Hopper backward's main kernels compiled here (no GPU), ours and FA3's, and the steps of each
# (bwd_steps.py): the comparison in README.md.
#   OUT=DIR [HDIM=64,128] [DTYPE=fp16] bash benchmarks/bwd_sass_fa3/sass.sh ours [NVCC_FLAGS...]   our main kernels (causal
#       and not; the default kernels, not the deterministic twins) through `flashbuild --compile-only`, only their
#       device-only TUs built: DIR/ours-hHDIM-{plain,causal}.{sass,ptxas,steps}
#   OUT=DIR FA3=TREE [HDIM=64,128] bash benchmarks/bwd_sass_fa3/sass.sh fa3   FA3's fp16 backward TUs (each holds
#       the causal and non-causal kernels) through `flashbuild build --profile flash-attn-3 --features cluster
#       --compile-only`, only those TUs built: DIR/fa3-hHDIM.{sass,ptxas,steps}
# nvcc jobs: one at a time, nice 15. On 2 shared cores: FA3's hdim-64 TU ~2 min, hdim-128 ~4 min; ours ~1-2 min a TU.
if [ "$1" = -h ] || [ "$1" = --help ] || [ $# -lt 1 ]; then sed -n 2,11p "$0" | cut -c3-; exit 0; fi
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd); OUT=${OUT:-/tmp/bwd_sass_fa3}; mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HDIM=${HDIM:-64,128}; DTYPE=${DTYPE:-fp16}  # ours: fp16 or bf16 (FA3: fp16)
SITE=$(python3 -c "import cutlass_library, os; print(os.path.dirname(os.path.dirname(cutlass_library.__file__)))")
OBJDUMP=$(command -v cuobjdump || echo "$SITE/nvidia/cu13/bin/cuobjdump")
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-$OUT/cache}  # never the shared default cache
what=$1; shift

# render SELECTION...: the build dir of a selection with its generated sources and build.ninja; the build is
# stopped before its first compile finishes (the ninja file is written first), then only the wanted TUs are built.
render() {
  local dir pid
  dir=$(python3 -m flashbuild build "$@" --dry-run | awk '$1 == "build" && $2 == "dir" {print $3}')
  [ -n "$dir" ] || { echo "sass.sh: no build dir in the plan of: $*" >&2; exit 1; }
  if [ ! -f "$dir/build.ninja" ]; then
    python3 -m flashbuild build "$@" --compile-only --jobs 1 > "$OUT/render.log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do [ -f "$dir/build.ninja" ] && break; sleep 1; done
    kill "$pid" 2> /dev/null || true; wait "$pid" 2> /dev/null || true
  fi
  [ -f "$dir/build.ninja" ] || { echo "sass.sh: $dir/build.ninja was not written (see $OUT/render.log)" >&2; exit 1; }
  echo "$dir"
}

# dump OBJ NAME: SASS, registers / spills (ptxas lines from the ninja output), the steps.
dump() {
  local obj=$1 name=$2 bin=$1
  [ -f "$obj.fatbin" ] && bin=$obj.fatbin  # a device-only TU keeps its fatbin beside the host object
  "$OBJDUMP" -sass "$bin" > "$OUT/$name.sass"
  "$OBJDUMP" -res-usage "$bin" > "$OUT/$name.res" 2>&1 || true
  python3 "$HERE/bwd_steps.py" "$OUT/$name.sass" --all | tee "$OUT/$name.steps"
}

IFS=, read -r -a dims <<< "$HDIM"
if [ "$what" = ours ]; then
  flags=()
  for f in "$@"; do flags+=("--nvcc-flag=$f"); done
  dir=$(render --hdim "$HDIM" --dtype "$DTYPE" --arch sm90 --direction bwd --causal both --no-local --no-softcap "${flags[@]}")
  for d in "${dims[@]}"; do
    for spec in plain:bwd_hdim${d}_${DTYPE}_sm90_kernel causal:bwd_hdim${d}_${DTYPE}_causal_sm90_kernel; do
      IFS=: read -r kind tu <<< "$spec"
      (cd "$dir" && nice -n 15 ninja -j1 "obj/$tu.o") > "$OUT/ours-h$d-$kind.ptxas" 2>&1 || { cat "$OUT/ours-h$d-$kind.ptxas"; exit 1; }
      dump "$dir/obj/$tu.o" "ours-h$d-$kind"
    done
  done
elif [ "$what" = fa3 ]; then
  : "${FA3:?FA3=the unpacked tree (hopper/ and csrc/cutlass/include), docs/fa3.md}"
  dir=$(render --source "$FA3" --profile flash-attn-3 --hdim "$HDIM" --dtype fp16 --arch sm90 --direction bwd \
    --causal both --features cluster)
  for d in "${dims[@]}"; do
    tu=flash_bwd_hdim${d}_fp16_sm90
    (cd "$dir" && nice -n 15 ninja -j1 "obj/$tu.o") > "$OUT/fa3-h$d.ptxas" 2>&1 || { cat "$OUT/fa3-h$d.ptxas"; exit 1; }
    dump "$dir/obj/$tu.o" "fa3-h$d"
  done
else
  echo "sass.sh: unknown target '$what': ours or fa3 (--help)" >&2; exit 2
fi
