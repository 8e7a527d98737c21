#!/bin/bash
# Cold main job, compile-only, 2 jobs: old (HEAD) and new (working tree) in turns.
for round in 1 2; do
  for tree in new old; do
    src=/work/main; [ $tree = old ] && src=/tmp/lt/old
    rm -rf /tmp/lt/cold_$tree
    cd $src && /usr/bin/time -f "$tree round $round: %e s wall, %U s user, %M KB" env PYTHONPATH=$src python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 --compile-only --build-dir /tmp/lt/cold_$tree -j 2 > /tmp/lt/cold_${tree}_$round.txt 2>&1
    tail -1 /tmp/lt/cold_${tree}_$round.txt
  done
done
