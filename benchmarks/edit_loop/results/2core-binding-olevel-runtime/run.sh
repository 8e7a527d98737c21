#!/bin/bash
# What the binding's -O level costs per call: hot.cpp (the binding's per-call host work, on CPU
# tensors) built at -O0, -Og, -O1, -O2 with the binding's flags against this machine's torch, then
# timed from Python (bench.py). Run in this folder; writes hot_O*.so here.
set -eo pipefail
TORCH=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
PY_INCLUDE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
for O in O0 Og O1 O2; do
  c++ -$O -fvisibility=hidden -std=c++20 -fPIC -shared -I"$TORCH/include" -I"$TORCH/include/torch/csrc/api/include" \
    -I"$PY_INCLUDE" -D_GLIBCXX_USE_CXX11_ABI=1 -DTORCH_EXTENSION_NAME=hot_$O hot.cpp -o hot_$O.so \
    -L"$TORCH/lib" -lc10 -ltorch -ltorch_cpu -ltorch_python -Wl,-rpath,"$TORCH/lib"
done
python3 bench.py
