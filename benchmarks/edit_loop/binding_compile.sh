#!/bin/bash
# The binding TU (kernels/binding/flash_api.cpp) compiled alone, with the command the main job's ninja
# edge runs (issue 17: 29.4 s on the H200 host beside 16 kernel TUs, ~22 s alone), REPEATS times.
# Each run: wall, user+sys CPU seconds and peak RSS from /usr/bin/time -v, and the load average
# before it (other jobs on the machine share its cores).
#   bash benchmarks/edit_loop/binding_compile.sh [REPEATS]        (default 3; logs under $OUT)
# EXTRA_FLAGS are appended to the command: on a machine whose torch or CUDA lacks headers the CUDA
# build has (a CPU torch: c10/cuda/impl/cuda_cmake_macros.h; no cuBLAS/cuSPARSE headers), e.g.
#   EXTRA_FLAGS="-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE -I/path/to/nvidia/cu13/include"
# BINDING=FILE compiles FILE in the binding's place (e.g. an earlier version: git show REV:kernels/binding/flash_api.cpp).
set -eo pipefail
REPEATS=${1:-3}
case ":${PYTHONPATH:-}:" in *":$PWD:"*) ;; *) export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD ;; esac
OUT=${OUT:-/tmp/binding_compile_out}
BUILD=${BUILD:-/tmp/binding_compile_build}
mkdir -p "$OUT"
COMMAND="$(python3 benchmarks/edit_loop/binding_graph.py "$BUILD") ${EXTRA_FLAGS:-}"
[ -n "${BINDING:-}" ] && COMMAND=${COMMAND//$PWD\/kernels\/binding\/flash_api.cpp/$(realpath "$BINDING")}
{
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- kernels/binding 2>/dev/null || echo ' (binding modified)')${BINDING:+; binding: $BINDING}"
  echo "cores $(nproc); $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)')"
  echo "$(c++ --version | head -1)"
  echo "command (in $BUILD): $COMMAND"
} | tee "$OUT/binding-compile.txt"
for i in $(seq 1 "$REPEATS"); do
  rm -f "$BUILD/obj/flash_api.o"
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  (cd "$BUILD" && /usr/bin/time -v bash -c "$COMMAND") > "$OUT/binding-compile-run$i.txt" 2>&1
  python3 - "$OUT/binding-compile-run$i.txt" "$i" "$load" <<'EOF' | tee -a "$OUT/binding-compile.txt"
import re, sys
text = open(sys.argv[1]).read()
field = lambda name: re.search(rf"{name}: (.+)", text).group(1).strip()
wall = sum(float(p) * 60 ** i for i, p in enumerate(reversed(field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)").split(":"))))
user, system = float(field(r"User time \(seconds\)")), float(field(r"System time \(seconds\)"))
rss = int(field(r"Maximum resident set size \(kbytes\)")) / 1024 ** 2
print(f"run {sys.argv[2]}: wall {wall:.1f} s  user+sys {user + system:.1f} s ({user:.1f} + {system:.1f})  "
      f"peak RSS {rss:.2f} GiB  exit {field('Exit status')}  load before {sys.argv[3]}")
EOF
done
