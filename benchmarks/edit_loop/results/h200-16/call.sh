#!/bin/bash
# .device/old: `git archive 77f487c`, .device/new: `git archive 3462134` (no import of torch before the first compile).
# The cold main job (`python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90`, fresh cache each run), the two trees
# in turns, twice; then load() from a cold cache in a fresh process, in turns; then the new tree's quick test and no-op.
cd .device
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../.whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import torch; print('torch', torch.__version__)"  # the page cache holds torch for both trees
mkdir -p $OUT/logs
ROWS=()
now() { date +%s.%N; }
cold() {  # TREE ROUND
  local tree=$1 r=$2
  export FLASHBUILD_CACHE_DIR=/tmp/cache_$tree; rm -rf $FLASHBUILD_CACHE_DIR
  local t0=$(now)
  (cd $tree && PYTHONPATH=/tmp/site:$PWD python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90) > $OUT/logs/cold-$tree-$r.txt 2>&1
  local rc=$? t1=$(now)
  ROWS+=("$(printf 'cold main job  %-4s round %s  %6.2f s  rc %s  ninja: %s' $tree $r $(python3 -c "print($t1-$t0)") $rc "$(grep -o 'compiled [0-9]* targets in [0-9.]*s' $OUT/logs/cold-$tree-$r.txt)")")
  echo "${ROWS[-1]}"
}
coldload() {  # TREE
  local tree=$1
  export FLASHBUILD_CACHE_DIR=/tmp/cacheload_$tree; rm -rf $FLASHBUILD_CACHE_DIR
  local t0=$(now)
  (cd $tree && PYTHONPATH=/tmp/site:$PWD python3 -c "
import flashbuild, torch
m = flashbuild.load(hdim=64, dtype='fp16', arch='sm90')
q = torch.randn(2, 300, 8, 64, device='cuda', dtype=torch.float16)
print(m.__name__, 'loaded')") > $OUT/logs/load-$tree.txt 2>&1
  local rc=$? t1=$(now)
  ROWS+=("$(printf 'cold load()    %-4s          %6.2f s  rc %s' $tree $(python3 -c "print($t1-$t0)") $rc)")
  echo "${ROWS[-1]}"
}
cold old 1; cold new 1; cold new 2; cold old 2
coldload old; coldload new
export FLASHBUILD_CACHE_DIR=/tmp/cache_new
cd new; export PYTHONPATH=/tmp/site:$PWD
t0=$(now); python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > $OUT/logs/noop-new.txt 2>&1; t1=$(now)
ROWS+=("$(printf 'no-op          new            %6.2f s  %s' $(python3 -c "print($t1-$t0)") "$(head -1 $OUT/logs/noop-new.txt)")")
timeout 200 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/logs/test-full-new.txt 2>&1
ROWS+=("test --shapes full (new): rc $? $(tail -1 $OUT/logs/test-full-new.txt)")
cp /tmp/cache_new/*/torch_abi.rsp $OUT/logs/ 2>/dev/null
cd $OUT && tar czf logs.tgz logs && rm -rf logs
echo; printf '%s\n' "${ROWS[@]}"
