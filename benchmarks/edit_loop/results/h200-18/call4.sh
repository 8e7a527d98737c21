#!/bin/bash
# .device/head: `git archive 069055e` (the ABI probe as a force-included header). The cold main job twice (fresh cache
# each), its no-op from python and python3.12 (one build.ninja), the main job's full test, and the API tests
# (flashbuild.load of their own builds).
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
python3 -c "import torch"
now() { date +%s.%N; }
for r in 1 2; do
  export FLASHBUILD_CACHE_DIR=/tmp/cache_$r; rm -rf $FLASHBUILD_CACHE_DIR
  t0=$(now); python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > $OUT/cold-$r.txt 2>&1; rc=$?; t1=$(now)
  echo "cold main job round $r: $(python3 -c "print(round($t1-$t0,2))") s rc $rc; $(grep -o 'compiled [0-9]* targets in [0-9.]*s' $OUT/cold-$r.txt)"
done
cp /tmp/cache_2/*/torch_abi.h $OUT/
for py in python3 python3.12 python3; do
  t0=$(now); $py -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > $OUT/noop-$py.txt 2>&1; t1=$(now)
  echo "no-op ($py): $(python3 -c "print(round($t1-$t0,2))") s: $(head -1 $OUT/noop-$py.txt)"
done
timeout 150 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/test-full.txt 2>&1
echo "test --shapes full rc $?: $(tail -1 $OUT/test-full.txt)"
FLASHBUILD_CACHE_DIR=/tmp/cache_api timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_api_gpu.py tests/gpu/test_two_builds_gpu.py > $OUT/test-api.txt 2>&1
echo "api + two builds rc $?: $(tail -1 $OUT/test-api.txt)"
