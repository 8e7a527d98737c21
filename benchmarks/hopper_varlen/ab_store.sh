#!/bin/bash
# The packed store A/B (one GPU call, as run): .device/v1 = the tree whose packed calls store every
# tile with copy_rows, "." = TMA stores for tiles inside their sequence; .device/base = main before
# packed calls reached the Hopper kernel. Dense A/B (ab_trees.sh) with the packed tests beside it,
# then varlen_bench.py on "." and .device/v1.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site:$PWD
(cd .device/v1 && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/vb_v1 python3 -m flashbuild --hdim 64,128 --dtype fp16 --arch sm90 --direction fwd --causal both --no-local --no-softcap -j 6 > $OUT/build-v1.txt 2>&1) &
TREES="base=.device/base new=." SEL="--hdim 64,128 --dtype fp16 --arch sm90 --direction fwd --causal both --no-local --no-softcap" EXTRA=tests/gpu/test_hopper_varlen_gpu.py RUNS=2 bash benchmarks/checks/ab_trees.sh > $OUT/ab.txt 2>&1
wait
FLASHBUILD_CACHE_DIR=/tmp/ab_cache_new timeout 150 python3 benchmarks/hopper_varlen/varlen_bench.py --hdims 64,128 --json $OUT/varlen-new.json > $OUT/varlen-new.log 2>&1; echo "bench new rc $?"
(cd .device/v1 && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/vb_v1 timeout 150 python3 $OLDPWD/benchmarks/hopper_varlen/varlen_bench.py --hdims 64,128 --json $OUT/varlen-v1.json) > $OUT/varlen-v1.log 2>&1; echo "bench v1 rc $?"
tail -16 $OUT/ab.txt; grep -E "passed|failed" $OUT/extra-new.txt | tail -2
for f in $OUT/varlen-*.log; do echo "== $f"; sed -n '/^TFLOPS/,$p' $f; done
