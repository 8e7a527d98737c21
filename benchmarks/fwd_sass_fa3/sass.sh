#!/bin/bash
# The SASS of the hdim-128 Hopper forward kernels compiled here (no GPU), ours and FA3's, and the loops of each
# (sass_loops.py): the comparison in README.md.
#   OUT=DIR bash benchmarks/fwd_sass_fa3/sass.sh ours [DTYPE] [NVCC_FLAGS...]   our causal, non-causal 128-key and
#       176-key kernels (DTYPE kFp16 or kBf16), each its own cubin: DIR/ours-{causal,keys128,wide}.{cubin,sass,loops}
#   OUT=DIR FA3=TREE bash benchmarks/fwd_sass_fa3/sass.sh fa3    FA3's hdim-128 fp16 forward TU (causal and not,
#       the cluster kernels too) through `flashbuild build --profile flash-attn-3 --compile-only`, one TU built
#       with ninja alone (the support TUs take minutes and hold no attention kernel): DIR/fa3.{sass,loops}
# HDIM=256 (default 128): the hdim-256 kernels instead (ours: causal and plain; FA3: its hdim-256 TU).
# nvcc jobs: one at a time, nice 10. FA3's TU takes ~10 min on 2 cores.
if [ "$1" = -h ] || [ "$1" = --help ] || [ $# -lt 1 ]; then sed -n 2,10p "$0" | cut -c3-; exit 0; fi
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd); OUT=${OUT:-/tmp/fwd_sass_fa3}; mkdir -p "$OUT"
SITE=$(python3 -c "import cutlass_library, os; print(os.path.dirname(os.path.dirname(cutlass_library.__file__)))")
OBJDUMP=$(command -v cuobjdump || echo "$SITE/nvidia/cu13/bin/cuobjdump")
what=$1; shift
HDIM=${HDIM:-128}
if [ "$what" = ours ]; then
  D=${1:-kFp16}; shift || true
  # name, causal, features (512: the 128-key kernel a wide variant keeps, fwd_params.h kKeys128Kernel)
  specs="causal:true:0 keys128:false:512 wide:false:0"
  [ "$HDIM" = 128 ] || specs="causal:true:0 plain:false:0"
  for spec in $specs; do
    IFS=: read -r name causal feat <<< "$spec"
    o=$OUT/ours-$name
    printf '#include "hopper/fwd_kernel.h"\ntemplate struct flashbuild::hopper::FwdKernelEntry<flashbuild::hopper::VariantTraits<%s, flashbuild::DType::%s, %s, %s>, %s, %s>;\n' \
      "$HDIM" "$D" "$causal" "$feat" "$causal" "$feat" > "$o.cu"
    nice -n 10 nvcc -Xcompiler -fPIC -std=c++17 -O3 --use_fast_math --expt-relaxed-constexpr --expt-extended-lambda \
      -I"$ROOT/kernels" -I"$SITE/cutlass_library/source/include" -DNDEBUG "$@" -gencode arch=compute_90a,code=sm_90a \
      -cubin "$o.cu" -o "$o.cubin" -Xptxas -v 2> "$o.ptxas" || { cat "$o.ptxas"; exit 1; }
    "$OBJDUMP" -sass "$o.cubin" > "$o.sass"
    echo "== ours $name ($D $*): $(grep -o 'Used [0-9]* registers' "$o.ptxas" | head -1), $(grep -o '[0-9]* bytes spill stores' "$o.ptxas" | head -1)" | tee "$o.loops"
    python3 "$HERE/sass_loops.py" "$o.sass" --function fwd_kernel --timeline | tee -a "$o.loops"
  done
elif [ "$what" = fa3 ]; then
  : "${FA3:?FA3=the unpacked tree (hopper/ and csrc/cutlass/include), docs/fa3.md}"
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
  sel=(--source "$FA3" --profile flash-attn-3 --hdim "$HDIM" --dtype fp16 --arch sm90 --direction fwd --causal both --features cluster)
  dir=$(python3 -m flashbuild build "${sel[@]}" --dry-run | awk '$1 == "build" && $2 == "dir" {print $3}')
  # Render only: the build writes build.ninja before its first compile; stop it there, then build the one TU.
  python3 -m flashbuild build "${sel[@]}" --compile-only --jobs 1 > "$OUT/fa3-render.log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do [ -f "$dir/build.ninja" ] && break; sleep 1; done
  kill "$pid" 2> /dev/null || true; wait "$pid" 2> /dev/null || true
  obj=obj/flash_fwd_hdim${HDIM}_fp16_sm90.o
  (cd "$dir" && nice -n 10 ninja -j1 "$obj")
  "$OBJDUMP" -sass "$dir/$obj" > "$OUT/fa3.sass"
  "$OBJDUMP" -res-usage "$dir/$obj" > "$OUT/fa3.res" 2>&1 || true
  python3 "$HERE/sass_loops.py" "$OUT/fa3.sass" --list | tee "$OUT/fa3.loops"
  python3 - "$OUT/fa3.sass" << 'EOF' | while read -r fn; do python3 "$HERE/sass_loops.py" "$OUT/fa3.sass" --function "$fn" --timeline; done | tee -a "$OUT/fa3.loops"
import re, sys
for line in open(sys.argv[1]):
    m = re.match(r"\s+Function : (\S+)", line)
    if m and "FlashAttnFwd" in m.group(1):
        print(m.group(1))
EOF
else
  echo "sass.sh: unknown target '$what': ours or fa3 (--help)" >&2; exit 2
fi
