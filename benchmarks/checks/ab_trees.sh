#!/bin/bash
# Kernel trees A/B on the GPU machine, one call. From the repository root:
#   TREES="base=.device/a select=.device/b new=." SEL="--hdim 64 ..." bash benchmarks/checks/ab_trees.sh
# TREES: name=dir pairs, the first the baseline (each dir holds kernels/ flashbuild/ templates/ configs/
# pyproject.toml, e.g. `git archive REV kernels flashbuild templates configs pyproject.toml | tar -x -C DIR`;
# "." is this tree). SEL: the flashbuild selection (fwd or bwd: `bench` times cuDNN beside either; nvcc flags ride in it too). EXTRA: a
# pytest path run against the last tree while the builds run (its own selections). RUNS (3), SEQLENS,
# REPS (30). Every tree's SEL is built side by side (a cache each), `flashbuild test --shapes full` runs for
# every tree but the first, then `flashbuild bench` of the trees in turns, RUNS rounds; the table
# (benchmarks/checks/ab_table.py) is printed last. Output under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/ab_out}; mkdir -p "$OUT"; RUNS=${RUNS:-3}; SEQLENS=${SEQLENS:-1024,4096,16384}; REPS=${REPS:-30}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
root=$PWD; names=(); dirs=()
for pair in $TREES; do names+=("${pair%%=*}"); dirs+=("$(cd "${pair#*=}" && pwd)"); done
# fb I LIMIT ARGS...: flashbuild from tree I, with its own cache
fb() { local i=$1 limit=$2; shift 2; (cd "${dirs[$i]}" && PYTHONPATH=/tmp/site:$PWD \
  FLASHBUILD_CACHE_DIR=/tmp/ab_cache_${names[$i]} timeout "$limit" python3 -m flashbuild "$@"); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
last=$(( ${#names[@]} - 1 ))
if [ -n "$EXTRA" ]; then
  (cd "${dirs[$last]}" && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/ab_cache_${names[$last]} \
    timeout 300 python3 -m pytest -q -rs -p no:cacheprovider "$root/$EXTRA" > "$OUT/extra-${names[$last]}.txt" 2>&1
   echo "== extra (${names[$last]}): rc $?" >> "$OUT/extra-${names[$last]}.txt") &
fi
for i in "${!names[@]}"; do fb "$i" 300 $SEL -j 8 > "$OUT/build-${names[$i]}.txt" 2>&1 & done
wait; echo "== builds and extra $(at)"; for n in "${names[@]}"; do echo "$n: $(grep -E '^compiled|rror' "$OUT/build-$n.txt" | head -2)"; done
[ -n "$EXTRA" ] && tail -2 "$OUT/extra-${names[$last]}.txt"
for i in "${!names[@]}"; do [ "$i" = 0 ] && continue
  fb "$i" 150 test $SEL --shapes full > "$OUT/test-${names[$i]}.txt" 2>&1; echo "== test ${names[$i]}: rc $?"
  grep -E "passed, [0-9]+ failed" "$OUT/test-${names[$i]}.txt" | tail -1; done
for r in $(seq "$RUNS"); do for i in "${!names[@]}"; do
  fb "$i" 120 bench $SEL --seqlens "$SEQLENS" --reps "$REPS" --json "/tmp/ab-${names[$i]}-$r.json" > "/tmp/ab-${names[$i]}-$r.txt" 2>&1
  echo "== bench ${names[$i]} r$r rc $? $(at)"; done; done
python3 "$root/benchmarks/checks/ab_table.py" "$OUT" "$RUNS" "${names[@]}" | tee "$OUT/rows.txt"
