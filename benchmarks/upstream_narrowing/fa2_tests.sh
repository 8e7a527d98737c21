#!/bin/bash
# flash-attn 2.8.3's own test_flash_attn_output on the narrowed hdim-128 fp16 fwd+bwd slice (sm90, causal on,
# features none: the device kernels an sm90 device cannot run left out), through pytest_slice, for a bounded
# time; a case that reaches a kernel the slice left out (the num_splits heuristic) is a skip naming it.
#   DATA=.device/wup-data TEST_SECS=150 bash benchmarks/upstream_narrowing/fa2_tests.sh
set -o pipefail
if [ "$1" = --help ]; then sed -n 2,5p "$0"; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
LOG=${OUT:-/tmp/fa2_tests}; DATA=${DATA:-.device/wup-data}; mkdir -p "$LOG" /tmp/fa2t
[ -d /tmp/fa2t/flash_attn-2.8.3 ] || tar -C /tmp/fa2t -xzf "$DATA/flash_attn-2.8.3.tar.gz" || exit 1
export FLASHBUILD_CACHE_DIR=/tmp/fa2t/cache
SEL=(--source /tmp/fa2t/flash_attn-2.8.3 --hdim 128 --dtype fp16 --arch sm90 --direction fwd,bwd --causal on --features none)
s=$(date +%s); python3 -m flashbuild build "${SEL[@]}" --jobs 4 > "$LOG/fa2-build.txt" 2>&1; echo "build rc $? in $(( $(date +%s) - s )) s" >> "$LOG/fa2-build.txt"
(cd /tmp && timeout -s INT -k 15 "${TEST_SECS:-150}" python3 -m flashbuild run "${SEL[@]}" -- python3 -m pytest \
  /tmp/fa2t/flash_attn-2.8.3/tests/test_flash_attn.py -k test_flash_attn_output -p flashbuild.sources.pytest_slice \
  -p no:cacheprovider --import-mode=append -q -rfE) > "$LOG/fa2-tests.txt" 2>&1
echo "== fa2 slice"; tail -1 "$LOG/fa2-build.txt"; grep -E "^FAILED|^ERROR|flashbuild slice:" "$LOG/fa2-tests.txt" | head -8 | cut -c1-300
grep -E "passed|failed" "$LOG/fa2-tests.txt" | tail -1
