# From the repository root on the nvidia-h200 machine; "base" is the tree before the change, unpacked
# into .notes/base (git archive d8c335d kernels flashbuild templates configs pyproject.toml).
#   bash benchmarks/fwd_persistent/ab.sh ab       the persistent A/B (default build against
#                   -DFLASHBUILD_FWD_PERSISTENT=0) and hdim 128 against base (persistent-ab.rows.txt)
#   bash benchmarks/fwd_persistent/ab.sh checks   the final checks (tests, splitkv checks) and the decode
#                   A/B against base (decode-ab.rows.txt)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
S="--dtype fp16,bf16 --arch sm90 --direction fwd --no-local --no-softcap"
if [ "${1:-ab}" = ab ]; then
P0="--nvcc-flag=-DFLASHBUILD_FWD_PERSISTENT=0"
python3 -m flashbuild --hdim 128,192,256 $S -j 8 > $OUT/build-new.txt 2>&1 &
python3 -m flashbuild --hdim 256 $S --causal off $P0 -j 2 > /dev/null 2>&1 &
python3 -m flashbuild --hdim 128 --dtype fp16 --arch sm90 --direction splitkv --no-local --no-softcap -j 2 > /dev/null 2>&1 &
(cd .notes/base && FLASHBUILD_CACHE_DIR=/tmp/fbc_base PYTHONPATH=/tmp/site:$PWD python3 -m flashbuild --hdim 128 $S -j 4 > /dev/null 2>&1) &
timeout 400 python3 -m pytest -q tests/gpu/test_persistent_fwd_gpu.py -s > $OUT/pytest-persistent.txt 2>&1 &
wait; echo "build $(( $(date +%s) - t0 )) s"; tail -1 $OUT/build-new.txt; grep -E "err|passed|failed" $OUT/pytest-persistent.txt | tail -12
timeout 150 python3 -m flashbuild test --hdim 128,192,256 $S --shapes full > $OUT/test-fwd.txt 2>&1; echo "test fwd rc $?"; grep -E "passed, [0-9]+ failed" $OUT/test-fwd.txt | tail -1
timeout 100 python3 -m flashbuild test --hdim 128 --dtype fp16 --arch sm90 --direction splitkv --no-local --no-softcap --shapes quick > $OUT/test-splitkv.txt 2>&1; echo "test splitkv rc $?"; grep -E "passed, [0-9]+ failed" $OUT/test-splitkv.txt | tail -1
for r in 1 2 3; do for v in new p0; do F=""; [ $v = p0 ] && F=$P0
  timeout 80 python3 -m flashbuild bench --hdim 256 $S --causal off $F --seqlens 1024,4096,16384 --reps 30 > /tmp/$v-$r.txt 2>&1; echo "== $v r$r"; grep -E "^fwd_" /tmp/$v-$r.txt | awk '{print $1,$2,$4,$7}'; done; done
echo "t $(( $(date +%s) - t0 )) s"
for v in base new; do
  if [ $v = base ]; then (cd .notes/base && FLASHBUILD_CACHE_DIR=/tmp/fbc_base PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -m flashbuild bench --hdim 128 $S --seqlens 1024,4096,16384 --reps 30 > /tmp/$v-128.txt 2>&1)
  else timeout 100 python3 -m flashbuild bench --hdim 128 $S --seqlens 1024,4096,16384 --reps 30 > /tmp/$v-128.txt 2>&1; fi
  echo "== $v hdim128"; grep -E "^fwd_" /tmp/$v-128.txt | awk '{print $1,$2,$4,$7}'; done
echo "t $(( $(date +%s) - t0 )) s"
else
K="import flashbuild; flashbuild.load(hdim='64,128', dtype='fp16', arch='native', direction='splitkv', causal='both')"
python3 -m flashbuild --hdim 128,192,256 $S -j 6 > $OUT/build-new.txt 2>&1 &
python3 -c "$K" > /dev/null 2>&1 &
(cd .notes/base && FLASHBUILD_CACHE_DIR=/tmp/fbc_base PYTHONPATH=/tmp/site:$PWD python3 -c "$K" > /dev/null 2>&1) &
timeout 400 python3 -m pytest -q tests/gpu/test_persistent_fwd_gpu.py > $OUT/pytest-persistent.txt 2>&1 &
wait; echo "build $(( $(date +%s) - t0 )) s"; tail -1 $OUT/build-new.txt; tail -1 $OUT/pytest-persistent.txt
timeout 150 python3 -m flashbuild test --hdim 128,192,256 $S --shapes full > $OUT/test-fwd.txt 2>&1; echo "test fwd rc $?"; grep -E "passed, [0-9]+ failed" $OUT/test-fwd.txt | tail -1
timeout 150 python3 -m flashbuild test --hdim 64,128 --dtype fp16 --arch sm90 --direction splitkv --shapes quick > $OUT/test-splitkv.txt 2>&1; echo "test splitkv rc $?"; grep -E "passed, [0-9]+ failed" $OUT/test-splitkv.txt | tail -1
for r in 1 2; do for v in base new; do
  if [ $v = base ]; then (cd .notes/base && FLASHBUILD_CACHE_DIR=/tmp/fbc_base PYTHONPATH=/tmp/site:$PWD timeout 100 python3 ../../benchmarks/decode/decode_bandwidth.py --batch 1,8,64 --cache 16384,131072 > /tmp/d.txt 2>&1)
  else timeout 100 python3 benchmarks/decode/decode_bandwidth.py --batch 1,8,64 --cache 16384,131072 > /tmp/d.txt 2>&1; fi
  echo "== decode $v r$r"; grep -E "^\| [0-9]" /tmp/d.txt; done; done | tee $OUT/decode-ab.rows.txt
echo "t $(( $(date +%s) - t0 )) s"
fi
