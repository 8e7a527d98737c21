#!/usr/bin/env bash
# FlashInfer's decode beside ours and SDPA in issue 45's table (README.md beside), one nvidia-h200 call: ours built,
# FlashInfer's four decode modules compiled in parallel (prewarm.py: hdim 64 / 128, plain and tensor cores, each
# checked against a float32 reference), then decode_table.py --flashinfer. Carry `.whl` and `.device/flashinfer` (the
# wheel built from flashinfer-python 0.2.14.post1's sdist, README.md). From the repo root:
#   OUT=$OUT [REPS=10] [PAGE=16] bash benchmarks/decode_flashinfer/run.sh
. "$(dirname "$0")/../study_start.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/flashinfer/*.whl 2>&1 | tail -2
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 8 > "$OUT/build.txt" 2>&1 &
for h in 64 128; do
  for tc in "" --tensor-cores; do
    MAX_JOBS=4 timeout 330 python3 benchmarks/decode_flashinfer/prewarm.py --hdim $h $tc > "/tmp/prewarm-$h$tc.txt" 2>&1 &
  done
done
wait; echo "== builds and FlashInfer's compiles $(at)"; tail -n 1 "$OUT/build.txt"
for f in /tmp/prewarm-*.txt; do echo "-- $f"; tail -n 4 "$f"; done | tee "$OUT/prewarm.txt" | cut -c1-300
timeout 200 python3 benchmarks/decode/decode_table.py --reps "${REPS:-10}" --skip-no-idx --paths "" --flashinfer --flashinfer-page "${PAGE:-16}" \
  --json "$OUT/table.json" > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"
grep -E "^FlashInfer" "$OUT/table.txt" | cut -c1-300 | head -8
sed -n '/FlashInfer µs/,$p' "$OUT/table.txt"
