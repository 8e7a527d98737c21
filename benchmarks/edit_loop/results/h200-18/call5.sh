#!/bin/bash
# .device/head: `git archive 069055e`, on the machine call4.sh ran on (warm): the cold main job (fresh build cache each
# round) three more times, each its own cache dir, nothing else running.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
now() { date +%s.%N; }
for r in 3 4 5; do
  export FLASHBUILD_CACHE_DIR=/tmp/cache_$r; rm -rf $FLASHBUILD_CACHE_DIR
  t0=$(now); python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > $OUT/cold-$r.txt 2>&1; rc=$?; t1=$(now)
  echo "cold main job round $r: $(python3 -c "print(round($t1-$t0,2))") s rc $rc; $(grep -o 'compiled [0-9]* targets in [0-9.]*s' $OUT/cold-$r.txt); longest: $(grep -A1 '^compiled' $OUT/cold-$r.txt | tail -1)"
done
