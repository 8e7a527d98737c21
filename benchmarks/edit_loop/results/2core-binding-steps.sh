#!/bin/bash
# The binding's compile, step by step (2-core machine, CPU torch 2.13): the main job's ninja command
# for obj/flash_api.o (binding_graph.py) with its source swapped for each step's flash_api.cpp, and
# last the final source at other -O levels (a later -O wins). Rounds interleave the variants, so
# load from other jobs spreads over all. The steps' sources are made here from git:
#   a_before       2e3f360 (ATen/ATen.h, ATen/cuda/CUDAContext.h, c10/cuda/CUDAGuard.h, torch/python.h)
#   b_pybind       a with torch/python.h -> torch/csrc/utils/pybind.h
#   c_ops          b with ATen/ATen.h -> ATen/core/Tensor.h, TensorOperators.h, TensorIndexing.h and
#                  ATen/ops/*.h under AT_PER_OPERATOR_HEADERS + TORCH_ASSERT_ONLY_METHOD_OPERATORS
#   d_no_indexing  c without ATen/TensorIndexing.h (the KV-cache write-back through the index ops)
#   e_after        737d5b7 (d, and ATen/cuda/CUDAContext.h -> c10/cuda/CUDAStream.h + cudaDeviceGetAttribute)
# CPU torch: -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE; the cuBLAS/cuSPARSE/cuSOLVER headers that
# ATen/cuda/CUDAContext.h needs (a-d) come from the nvidia-cublas, -cusparse, -cusolver wheels ($CUHDR).
#   CUHDR=/tmp/cuhdr/nvidia/cu13/include bash 2core-binding-steps.sh ROUNDS > log
set -eo pipefail
ROUNDS=${1:-3}
BUILD=${BUILD:-/tmp/binding_steps_build}
STEPS=${STEPS:-/tmp/binding_steps_sources}
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$STEPS"
git -C "$REPO" show 2e3f360:kernels/binding/flash_api.cpp > "$STEPS/a_before.cpp"
git -C "$REPO" show 737d5b7:kernels/binding/flash_api.cpp > "$STEPS/e_after.cpp"
python3 - "$STEPS" <<'PY'
import sys
from pathlib import Path
steps = Path(sys.argv[1])
s = (steps / "a_before.cpp").read_text().replace("#include <torch/python.h>", "#include <torch/csrc/utils/pybind.h>")
(steps / "b_pybind.cpp").write_text(s)
ops = "".join(f"#include <ATen/ops/{op}.h>\n" for op in ("aminmax", "arange", "constant_pad_nd", "div", "empty",
                                                          "empty_like", "remainder", "stack", "zeros"))
s = s.replace("#include <ATen/ATen.h>\n", "#define AT_PER_OPERATOR_HEADERS\n#define TORCH_ASSERT_ONLY_METHOD_OPERATORS\n"
              "#include <ATen/TensorIndexing.h>\n#include <ATen/TensorOperators.h>\n#include <ATen/core/Tensor.h>\n" + ops)
(steps / "c_ops.cpp").write_text(s)
old = "  cache.index_put_({block, row}, padded.index({block, row}).narrow(-1, 0, cache.size(-1)));\n"
new = ("  const c10::List<std::optional<at::Tensor>> at_rows{block, row};\n"
       "  cache.index_put_(at_rows, padded.index(at_rows).narrow(-1, 0, cache.size(-1)));\n")
assert old in s
(steps / "d_no_indexing.cpp").write_text(s.replace("#include <ATen/TensorIndexing.h>\n", "").replace(old, new))
PY
COMMAND=$(cd "$REPO" && PYTHONPATH=$REPO python3 benchmarks/edit_loop/binding_graph.py "$BUILD")
SOURCE=$REPO/kernels/binding/flash_api.cpp
echo "ninja's command: $COMMAND"
variants=(a_before b_pybind c_ops d_no_indexing e_after e_after:-O1 e_after:-Og e_after:-O0)
for round in $(seq 1 "$ROUNDS"); do
  for v in "${variants[@]}"; do
    step=${v%%:*}; level=${v#*:}; [ "$level" = "$v" ] && level=
    cmd="${COMMAND//$SOURCE/$STEPS/$step.cpp} -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE -I$CUHDR $level"
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    rm -f "$BUILD/obj/flash_api.o"
    out=$( { cd "$BUILD" && /usr/bin/time -f "%e %U %S %M %x" bash -c "$cmd" 2>&1 >/dev/null; } | tail -1)
    read -r wall user sys rss rc <<< "$out"
    printf '%-16s round %s  wall %6.1f s  user+sys %5.1f s  peak RSS %.2f GiB  exit %s  load before %s\n' \
      "$v" "$round" "$wall" "$(echo "$user + $sys" | bc)" "$(echo "$rss / 1048576" | bc -l)" "$rc" "$load"
  done
done
