#!/bin/bash
# Issue 20 on the H200: the main job's selection built as 4 shards (at once, 4 jobs each, as 4 machines
# would), linked on one machine, and checked with `flashbuild test` on the linked build dir (which must
# compile nothing), beside the same selection built on one machine. Then (issue 21) `flashbuild test`
# of a small FA3 slice through its Python API, when .device/fa3 is carried. Summary last; logs in $OUT.
#   bash benchmarks/ci_shards/run.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/ci_shards_out}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/fb-cache
FB="python3 -m flashbuild"
SEL=(--hdim 64 --dtype fp16 --arch sm90)
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
secs() { python3 -c "print(round($(date +%s.%N) - $1, 1))"; }

s=$(date +%s.%N)
for i in 1 2 3 4; do
  # a cache dir each, as on 4 machines (one build dir would serialise them on its lock)
  FLASHBUILD_CACHE_DIR=/tmp/fb-shard$i $FB build "${SEL[@]}" --shard $i/4 --artifact-dir /tmp/art$i --jobs 4 > "$OUT/shard$i.txt" 2>&1 &
done
wait; shards_wall=$(secs $s)
echo "== 4 shards at once (4 jobs each): ${shards_wall} s"; grep -hE "^shard|compiled" "$OUT"/shard*.txt | head -8
s=$(date +%s.%N); $FB link /tmp/art1 /tmp/art2 /tmp/art3 /tmp/art4 --build-dir /tmp/linked > "$OUT/link.txt" 2>&1
echo "== link rc $? in $(secs $s) s"; tail -4 "$OUT/link.txt"
s=$(date +%s.%N); timeout 200 $FB test "${SEL[@]}" --build-dir /tmp/linked > "$OUT/test-linked.txt" 2>&1
rc_linked=$?; test_linked=$(secs $s)
echo "== test on the linked dir rc $rc_linked in $test_linked s"; grep -E "compil|using build|passed" "$OUT/test-linked.txt" | head -5

if [ "${ONE:-1}" = 1 ]; then   # ONE=0: the cold one-machine build is measured elsewhere (edit_loop/run.sh)
  s=$(date +%s.%N); $FB build "${SEL[@]}" --jobs 16 > "$OUT/one-machine.txt" 2>&1
  echo "== one machine, 16 jobs: rc $? in $(secs $s) s"; grep -E "^compiled" "$OUT/one-machine.txt"
fi

if [ "${FA3:-1}" = 1 ] && [ -f .device/fa3/flash-attention-0251105a-hopper-cutlass-7127592.tar.gz ]; then
  mkdir -p /tmp/fa3; [ -d /tmp/fa3/flash-attention-0251105a ] || \
    tar -C /tmp/fa3 -xzf .device/fa3/flash-attention-0251105a-hopper-cutlass-7127592.tar.gz
  FA3=(--source /tmp/fa3/flash-attention-0251105a --profile flash-attn-3 --hdim 64 --dtype fp16 --arch sm90
       --direction fwd,bwd --features none)
  s=$(date +%s.%N); (cd /tmp && timeout $(( ${BUDGET:-560} - $(now) - 10 )) $FB test "${FA3[@]}" --shapes full) \
    > "$OUT/test-fa3.txt" 2>&1
  echo "== flashbuild test of the FA3 slice rc $? in $(secs $s) s"; grep -E "^compiled|passed|FAIL" "$OUT/test-fa3.txt" | head -8
fi
echo "== summary at $(now) s"
echo "4 shards + link: shards ${shards_wall} s; test on linked dir rc $rc_linked ($(grep -cE '^\[[0-9]+/' "$OUT/test-linked.txt") ninja steps): $(grep -E 'passed' "$OUT/test-linked.txt" | tail -1)"
[ -f "$OUT/one-machine.txt" ] && grep -E "^compiled" "$OUT/one-machine.txt" | sed 's/^/one machine: /'
[ -f "$OUT/test-fa3.txt" ] && echo "FA3 slice: $(grep -E 'passed' "$OUT/test-fa3.txt" | tail -1)"
