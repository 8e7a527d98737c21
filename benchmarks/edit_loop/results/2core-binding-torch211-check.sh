#!/bin/bash
# The binding before (2e3f360) and after (737d5b7) against the CUDA torch of the GPU host, 2.11.0+cu130,
# without a GPU: its headers and libraries from the wheel (pip download --no-deps torch==2.11.*;
# unzip 'torch/include/*' 'torch/lib/*' -d $T211), C++17 as flashbuild picks for torch < 2.13. Each
# object is compiled once (timed), and its undefined symbols that none of torch's libraries
# (libc10, libc10_cuda, libtorch, libtorch_cpu, libtorch_cuda, libtorch_python) defines are listed,
# less the C/C++ runtime's and Python's: what the link leaves to the kernel objects and to libcudart.
#   T211=/tmp/t211/torch CUHDR=/tmp/cuhdr/nvidia/cu13/include GENERATED=<build dir>/generated bash 2core-binding-torch211-check.sh
set -eo pipefail
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
WORK=$(mktemp -d)
PY_INCLUDE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
FLAGS=(-O2 -fvisibility=hidden -std=c++17 -fPIC -I"$GENERATED" -I"$REPO/kernels" -I"$T211/include"
       -I"$T211/include/torch/csrc/api/include" -I"$PY_INCLUDE" -I/usr/local/cuda/include -I"$CUHDR"
       -DTORCH_EXTENSION_NAME=_flashbuild_04f85958 -DTORCH_API_INCLUDE_EXTENSION_H -D_GLIBCXX_USE_CXX11_ABI=1)
grep -m1 "^__version__" "$T211/version.py"
for lib in libc10 libc10_cuda libtorch libtorch_cpu libtorch_cuda libtorch_python; do
  nm -D --defined-only "$T211/lib/$lib.so" | awk '{print $NF}'
done | sort -u > "$WORK/torch.defined"
RUNTIME='^(Py|_Py|__cxa|__gxx|_Unwind|std::|operator (new|delete)|__stack_chk|mem|str|__dso_handle|__tls|pthread|vtable for std|typeinfo for std|VTT for std|__dynamic_cast|abort|free|malloc|typeinfo for (bool|double|int|__cxx)|vtable for __cxx|__assert_fail|__libc|f(flush|printf|putc)|sqrtf|stderr|vsnprintf)'
for commit in 2e3f360 737d5b7; do
  git -C "$REPO" show "$commit:kernels/binding/flash_api.cpp" > "$WORK/$commit.cpp"
  /usr/bin/time -f "$commit: compiled against torch 2.11 headers: wall %e s, user+sys %U + %S s, peak RSS %M KB, exit %x" \
    c++ "${FLAGS[@]}" -c "$WORK/$commit.cpp" -o "$WORK/$commit.o"
  nm -u "$WORK/$commit.o" | awk '{print $NF}' | sort -u > "$WORK/$commit.undefined"
  echo "$commit: $(wc -l < "$WORK/$commit.undefined") undefined symbols; those no torch 2.11 library defines (less the C/C++ runtime's and Python's):"
  comm -23 "$WORK/$commit.undefined" "$WORK/torch.defined" | c++filt | grep -v -E "$RUNTIME" | sed 's/^/  /'
done
echo "undefined symbols, before -> after (diff):"
diff <(c++filt < "$WORK/2e3f360.undefined") <(c++filt < "$WORK/737d5b7.undefined") || true
rm -rf "$WORK"
