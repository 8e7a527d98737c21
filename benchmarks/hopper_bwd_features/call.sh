#!/bin/bash
# .device/head: `git archive 4aafce1 | tar -x -C .device/head`; .device/base: `git archive 3a15410 kernels flashbuild templates configs pyproject.toml | tar -x -C .device/base`.
# The backward's feature variants, before (3a15410: the Ampere path compiled for sm_90a) and after (HEAD: the
# Hopper kernel with local + softcap): hdim 64/128 fp16, causal and not; bench in turns, softcap 30 and window
# (512, 0), 2 rounds each; the JSONs in one tarball.
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
S=$(date +%s); at() { echo "at $(( $(date +%s) - S )) s"; }
SEL="--hdim 64,128 --dtype fp16 --arch sm90 --direction bwd --causal both"
fb() { local dir=$1 name=$2 limit=$3; shift 3; (cd "$dir" && PYTHONPATH=/tmp/site:$PWD \
  FLASHBUILD_CACHE_DIR=/tmp/fc_$name timeout "$limit" python3 -m flashbuild "$@"); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/res
fb .device/base base 300 $SEL -j 8 > $OUT/build-base.txt 2>&1 &
fb .device/head new 300 $SEL -j 8 > $OUT/build-new.txt 2>&1 &
wait; echo "builds $(at)"; grep -E "^compiled [0-9]+ targets|rror" $OUT/build-base.txt $OUT/build-new.txt | head -4
fb .device/head new 120 test $SEL --shapes full > $OUT/test-new.txt 2>&1; echo "test new rc $?: $(tail -1 $OUT/test-new.txt)"
for r in 1 2; do for cfg in softcap window; do for t in base:.device/base new:.device/head; do
  name=${t%%:*}; dir=${t#*:}
  if [ $cfg = softcap ]; then F="--softcap 30"; else F="--window 512,0"; fi
  L=$(( 580 - ($(date +%s) - S) )); [ $L -lt 40 ] && { echo "skip $name $cfg r$r"; continue; }
  fb $dir $name $L bench $SEL --seqlens 1024,4096,16384 --reps 20 $F --json /tmp/res/$name-$cfg-$r.json > /tmp/res/$name-$cfg-$r.txt 2>&1
  echo "bench $name $cfg r$r rc $? $(at)"
done; done; done
tar -czf $OUT/bench.tgz -C /tmp/res .
