#!/bin/bash
# The SASS of one Hopper forward kernel, compiled here (no GPU): total and non-NOP instructions, slow integer
# divisions (MUFU.RCP), registers and spills, for comparing trees (results/sass/README.md).
#   bash benchmarks/fwd_tile_turnover/sass_count.sh KERNELS_DIR NAME HDIM CAUSAL [DTYPE]
#     KERNELS_DIR: a tree's kernels/ (e.g. a `git archive <commit> kernels` unpacked); CAUSAL true|false;
#     DTYPE kFp16 (default) or kBf16; OUT (default /tmp/sass_count) gets NAME-hHDIM-CAUSAL-DTYPE.{cu,cubin,sass}
if [ "$1" = -h ] || [ "$1" = --help ] || [ $# -lt 4 ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
K=$(cd "$1" && pwd) || exit 1; N=$2; H=$3; C=$4; D=${5:-kFp16}; OUT=${OUT:-/tmp/sass_count}; mkdir -p "$OUT"
SITE=$(python3 -c "import cutlass_library, os; print(os.path.dirname(os.path.dirname(cutlass_library.__file__)))")
CUTLASS=$SITE/cutlass_library/source/include
OBJDUMP=$(command -v cuobjdump || echo "$SITE/nvidia/cu13/bin/cuobjdump")
o=$OUT/$N-h$H-$C-$D
printf '#include "hopper/fwd_kernel.h"\ntemplate struct flashbuild::hopper::FwdKernelEntry<flashbuild::hopper::VariantTraits<%s, flashbuild::DType::%s, %s>, %s, 0>;\n' \
  "$H" "$D" "$C" "$C" > "$o.cu"
nice -n 10 nvcc -Xcompiler -fPIC -std=c++17 -O3 --use_fast_math --expt-relaxed-constexpr --expt-extended-lambda -I"$K" \
  -I"$CUTLASS" -DNDEBUG -gencode arch=compute_90a,code=sm_90a -cubin "$o.cu" -o "$o.cubin" -Xptxas -v 2> "$o.ptxas" \
  || { cat "$o.ptxas"; exit 1; }
"$OBJDUMP" -sass "$o.cubin" > "$o.sass"
ins() { grep -E '^\s+/\*[0-9a-f]{4,}\*/' "$o.sass"; }
echo "$N hdim $H causal $C $D: $(ins | wc -l) SASS instructions, $(ins | grep -vc NOP) not NOP," \
  "$(grep -c MUFU.RCP "$o.sass") MUFU.RCP; $(grep -o 'Used [0-9]* registers' "$o.ptxas" | head -1)," \
  "$(grep -o '[0-9]* bytes spill stores' "$o.ptxas" | head -1)"
