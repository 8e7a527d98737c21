#!/bin/bash
# .device/head: `git archive 7f210b1 | tar -x -C .device/head` (carried with .whl and this script).
# The edit loop's rounds at HEAD (the ABI probe: no import of torch before the first compile), cold main job first;
# the backward rounds touch the Hopper backward's mainloop and epilogue; then the host's CPU topology.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
python3 -c "import torch" # the page cache holds torch, as for the runs it is compared with
mkdir -p $OUT/edit
BWD_HEADERS="kernels/hopper/bwd_mainloop.h kernels/hopper/bwd_epilogue.h" BUDGET=330 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1
echo "edit loop rc $?"
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket)" > $OUT/lscpu.txt; cat $OUT/lscpu.txt
grep -A8 "^compiled 31 targets" $OUT/edit/cold-main-job.txt | head -9
echo; cat $OUT/edit/summary.txt
