#!/bin/bash
# usage: measure.sh TREE LABEL ; runs fwd causal and bwd plain, twice each, one TU alone
tree=$1; label=$2; out=/tmp/split/out; mkdir -p $out
cd $tree
for run in 1 2; do
for spec in "fwd on fwd_hdim64_fp16_causal_sm90" "bwd off bwd_hdim64_fp16_sm90"; do
  set -- $spec
  rm -rf /tmp/split/cache-$label
  f=$out/$label-$3-run$run.txt
  { echo "# $label tree=$tree run=$run $(date -Is) load: $(cat /proc/loadavg)"
    FLASHBUILD_CACHE_DIR=/tmp/split/cache-$label PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$tree /usr/bin/time -v python3 -m flashbuild build --hdim 64 --dtype fp16 --arch sm90 --direction $1 --causal $2 --no-local --no-softcap --compile-only --profile-compile --jobs 1 ${LAUNCH:+--launcher $LAUNCH} 2>&1
    echo "# compile_profile.txt:"; cat /tmp/split/cache-$label/*/compile_profile.txt; } > $f 2>&1
done; done
