#!/bin/bash
# The device call that made this folder (an nvidia-h200 machine, carrying .whl and .device/fa3: FA3 0251105a's hopper/
# and CUTLASS 7127592's include/ in the archive docs/fa3.md describes), main at 0f11ce2.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site:$PWD
HDIMS=128 DTYPES=fp16 BUDGET=570 bash benchmarks/fa3_slice/peer.sh
