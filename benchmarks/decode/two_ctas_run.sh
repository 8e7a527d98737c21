#!/usr/bin/env bash
# Issue 45, "Two CTAs per SM" (README.md): one GPU call. Two trees side by side under one directory: BASE (main's
# tree, the kernel as it is: one split-KV CTA per SM) and NEW (this branch). NEW is built twice: as it is, and as the
# study build -DFLASHBUILD_SPLITKV_CTAS_PER_SM=2 (two CTAs an SM: two stages of 64-key boxes at hdim 128, of 128-key
# boxes at hdim 64, 128 registers a thread at launch; common/splitkv_heuristic.h). The study flag reaches the kernel
# and launch TUs but not the binding (compiled without the user's nvcc flags), whose automatic split count stays the
# one-CTA rule: the study's small rows are read from the forced sweep (--sweep-splits), its batch-64 rows (one split
# either way) from `ours`. Steps: the builds; the KV-cache and one-launch GPU tests on the study build
# (FLASHBUILD_TEST_NVCC_FLAGS); decode_table.py with BASE's build, then with the study build, then both again at
# batch 1 and 8 (processes alternating). Every step bounded so the whole stays under DEADLINE seconds; logs under
# $OUT/r (tarred to $OUT/r.tar.gz), short tables last. Run from the directory that holds BASE and NEW.
set -u
OUT=${OUT:-two-ctas-out}
BASE=${BASE:-base}
NEW=${NEW:-new}
R="$OUT/r"
mkdir -p "$R"
DEADLINE=${DEADLINE:-200}
start=$(date +%s)
since() { echo "$(( $(date +%s) - start ))s"; }
left() { local rest=$(( DEADLINE - ($(date +%s) - start) )); (( rest < $1 )) && echo $(( rest > 1 ? rest : 1 )) || echo "$1"; }
SITE=${SITE:-/tmp/site}
STUDY="-DFLASHBUILD_SPLITKV_CTAS_PER_SM=2"
plain="--hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local --no-softcap"
timeout "$(left 110)" env PYTHONPATH="$SITE:$PWD/$BASE" FLASHBUILD_CACHE_DIR=/tmp/fbc-base \
  python3 -m flashbuild $plain --jobs 5 > "$R/build-base.log" 2>&1 &
timeout "$(left 110)" env PYTHONPATH="$SITE:$PWD/$NEW" FLASHBUILD_CACHE_DIR=/tmp/fbc-new \
  python3 -m flashbuild $plain --jobs 5 --nvcc-flag=$STUDY --nvcc-flag=-Xptxas=-v > "$R/build-study.log" 2>&1 &
timeout "$(left 110)" env PYTHONPATH="$SITE:$PWD/$NEW" FLASHBUILD_CACHE_DIR=/tmp/fbc-new \
  python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal both --jobs 6 \
  --nvcc-flag=$STUDY > "$R/build-study-tests.log" 2>&1 &
wait
echo "builds done at $(since)"
for f in "$R"/build-*.log; do echo "$f: $(tail -n 1 "$f")"; done
grep -E "Used [0-9]+ registers|spill" "$R/build-study.log" | sort | uniq -c | head -n 12
py="python3 -m pytest -q -rfE -p no:cacheprovider"
(cd "$NEW" && timeout "$(left 50)" env PYTHONPATH="$SITE:$PWD" FLASHBUILD_CACHE_DIR=/tmp/fbc-new \
  FLASHBUILD_TEST_NVCC_FLAGS="$STUDY" $py tests/gpu/test_kvcache_gpu.py tests/gpu/test_kvcache_one_launch_gpu.py) \
  > "$R/study-tests.log" 2>&1
echo "study tests rc=$? at $(since)"
table="$NEW/benchmarks/decode/decode_table.py"
timeout "$(left 45)" env PYTHONPATH="$SITE:$PWD/$BASE" FLASHBUILD_CACHE_DIR=/tmp/fbc-base \
  python3 "$table" --reps 10 --paths pdl-late --skip-no-idx --sweep-splits 8,16,32 --json "$R/base.json" \
  > "$R/base.txt" 2>&1
echo "base table rc=$? at $(since)"
timeout "$(left 45)" env PYTHONPATH="$SITE:$PWD/$NEW" FLASHBUILD_CACHE_DIR=/tmp/fbc-new \
  python3 "$table" --reps 10 --paths "" --skip-no-idx --sweep-splits 4,8,16,32,64 --nvcc-flag=$STUDY \
  --json "$R/study.json" > "$R/study.txt" 2>&1
echo "study table rc=$? at $(since)"
for round in 2; do
  timeout "$(left 20)" env PYTHONPATH="$SITE:$PWD/$BASE" FLASHBUILD_CACHE_DIR=/tmp/fbc-base \
    python3 "$table" --batch 1,8 --reps 10 --paths "" --skip-no-idx --sweep-splits 16 \
    --json "$R/base-round$round.json" > "$R/base-round$round.txt" 2>&1
  timeout "$(left 20)" env PYTHONPATH="$SITE:$PWD/$NEW" FLASHBUILD_CACHE_DIR=/tmp/fbc-new \
    python3 "$table" --batch 1,8 --reps 10 --paths "" --skip-no-idx --sweep-splits 4,32 --nvcc-flag=$STUDY \
    --json "$R/study-round$round.json" > "$R/study-round$round.txt" 2>&1
done
echo "round 2 done at $(since)"
tar -czf "$OUT/r.tar.gz" -C "$OUT" r
grep -E "passed|failed|^(FAILED|ERROR)" "$R/study-tests.log" | tail -n 6
for f in base study; do echo "== $f"; grep -E "^HBM|^\| (64|128) " "$R/$f.txt"; done
for f in base study; do echo "== $f sweep"; sed -n '/num_splits forced/,$p' "$R/$f.txt" | tail -n 12; done
