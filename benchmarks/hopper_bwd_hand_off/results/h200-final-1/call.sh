#!/bin/bash
# Issue 46, the kept defaults through flashbuild (2026-11-28 about 20:00 UTC, an nvidia-h200 machine, tree at 197499f):
# the worktree copied to /work/main/.device/w46b (benchmarks/ left out but for hopper_bwd_hand_off/); run with carry
# [".whl", ".device/w46b"], timeout_s 205 (wall 129.9 s):
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
cd .device/w46b && export PYTHONPATH=/tmp/site:$PWD && OUT=$OUT LIMIT=195 bash benchmarks/hopper_bwd_hand_off/final.sh
