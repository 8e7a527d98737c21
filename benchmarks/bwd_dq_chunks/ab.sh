# A/B of nvcc-define variants of the fp16 backward, built side by side and timed in turns (two
# rounds), from the repository root on the nvidia-h200 machine:
#   bash benchmarks/bwd_dq_chunks/ab.sh HDIMS NAME=DEFINES [NAME=DEFINES ...]
# DEFINES: comma-separated macro settings, or nothing. Environment: CAUSAL (on, off, both: default),
# SEQLENS (default 1024,4096,16384), TEST (a variant to run the quick checks on first).
# The runs behind this folder's rows files:
#   TEST=c2 bash benchmarks/bwd_dq_chunks/ab.sh 256 c1=FLASHBUILD_BWD_DQ_CHUNKS=1 c2=FLASHBUILD_BWD_DQ_CHUNKS=2
#   bash benchmarks/bwd_dq_chunks/ab.sh 64,128,192 c1=FLASHBUILD_BWD_DQ_CHUNKS=1 c2=FLASHBUILD_BWD_DQ_CHUNKS=2
#   (with benchmarks/archive/tried/bwd_dq_chunks--tried-bulk-reduce.diff (out of the tree: git show 75f2c05:benchmarks/archive/tried/bwd_dq_chunks--tried-bulk-reduce.diff | git apply) applied) CAUSAL=off SEQLENS=16384 bash benchmarks/bwd_dq_chunks/ab.sh 128,256 \
#       base=FLASHBUILD_AB_DQ_ATOMICS bulk= s1=FLASHBUILD_AB_BULK_SKIP=1 s2=FLASHBUILD_AB_BULK_SKIP=2 \
#       s4=FLASHBUILD_AB_BULK_SKIP=4 s5=FLASHBUILD_AB_BULK_SKIP=5
#   (on 3b108a5 with the FLASHBUILD_AB_RED switch described in tried-bulk-reduce.rows.txt)
#       CAUSAL=off SEQLENS=4096,16384 TEST=r1 bash benchmarks/bwd_dq_chunks/ab.sh 128,256 r0= r1=FLASHBUILD_AB_RED=1 r2=FLASHBUILD_AB_RED=2
# When the chunk runs were made, one chunk was the default everywhere and c1 left the define unset.
HDIMS=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
S="--dtype fp16 --arch sm90 --direction bwd --no-local --no-softcap --hdim $HDIMS --causal ${CAUSAL:-both}"
declare -A F; V=""
for arg in "$@"; do
  name=${arg%%=*}; defines=${arg#*=}; V="$V $name"; F[$name]=""
  for d in ${defines//,/ }; do F[$name]="${F[$name]} --nvcc-flag=-D$d"; done
done
for v in $V; do python3 -m flashbuild $S ${F[$v]} -j 8 > /dev/null 2>&1 & done; wait
echo "build $(( $(date +%s) - t0 )) s"
if [ -n "$TEST" ]; then python3 -m flashbuild test $S ${F[$TEST]} --shapes quick 2>&1 | grep -E "passed, [0-9]+ failed" | tail -1; fi
B="bench $S --seqlens ${SEQLENS:-1024,4096,16384} --reps 10"
for r in 1 2; do for v in $V; do timeout 60 python3 -m flashbuild $B ${F[$v]} > /tmp/$v-$r.txt 2>&1; echo "== $v"; grep -E "^(fwd|bwd)_" /tmp/$v-$r.txt | awk '{print $1,$2,$4,$7}'; done; done
echo "t $(( $(date +%s) - t0 )) s"
