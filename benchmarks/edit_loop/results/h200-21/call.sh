#!/bin/bash
# .device/head: `git archive b926c29` (the final tree). The edit loop once more, on whichever H200 comes, then one more cold job.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
mkdir -p $OUT/edit
BUDGET=230 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1
echo "edit loop rc $?"; cat $OUT/edit/summary.txt
export FLASHBUILD_CACHE_DIR=/tmp/cold_2; rm -rf $FLASHBUILD_CACHE_DIR
t0=$(date +%s.%N); python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > $OUT/cold-2.txt 2>&1; t1=$(date +%s.%N)
echo "cold main job round 2: $(python3 -c "print(round($t1-$t0,2))") s; $(grep -o "compiled [0-9]* targets in [0-9.]*s" $OUT/cold-2.txt)"
