#!/bin/bash
# .device/head: `git archive 3f9f7e8` (the final tree). The edit loop's rounds (run.sh's default headers: hopper/mainloop.h,
# hopper/epilogue.h, hopper/bwd_mainloop.h, hopper/bwd_epilogue.h), cold main job first; then two more cold jobs.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
mkdir -p $OUT/edit
BUDGET=230 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1
echo "edit loop rc $?"; cat $OUT/edit/summary.txt
grep -A4 "^compiled" $OUT/edit/cold-main-job.txt | head -5
now() { date +%s.%N; }
for r in 2 3; do
  export FLASHBUILD_CACHE_DIR=/tmp/cold_$r; rm -rf $FLASHBUILD_CACHE_DIR
  t0=$(now); python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > $OUT/cold-$r.txt 2>&1; t1=$(now)
  echo "cold main job round $r: $(python3 -c "print(round($t1-$t0,2))") s; $(grep -o 'compiled [0-9]* targets in [0-9.]*s' $OUT/cold-$r.txt); longest: $(grep -A1 '^compiled' $OUT/cold-$r.txt | tail -1)"
done
