#!/usr/bin/env bash
# Issue 45's last graph-replayed rows (README.md beside): hdim 128 at batch 64, ours against SDPA cuDNN under Nsight
# Compute, one nvidia-h200 call: the build, then ncu_small_calls.py at 4k and 64k keys (caches flushed before each
# kernel), the details page and one CSV line a kernel (ncu_summary.py). Carry `.whl`. From the repo root after the wheel
# line:
#   OUT=$OUT [CACHE=4096,65536] bash benchmarks/decode_b64_ncu/run.sh
. "$(dirname "$0")/../study_start.sh"
python3 -m flashbuild --hdim 64,128 --dtype fp16 --arch native --direction splitkv --causal off --no-local \
  --no-softcap --jobs 16 > "$OUT/build.log" 2>&1
echo "== build rc $? $(at)"
timeout 300 ncu --clock-control none --profile-from-start off --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis -f -o /tmp/b64 \
  python3 benchmarks/decode/ncu_small_calls.py --hdim 128 --batch 64 --cache "${CACHE:-4096,65536}" \
  --build-hdims 64,128 > "$OUT/ncu-run.log" 2>&1
echo "== ncu rc $? $(at)"
ncu --import /tmp/b64.ncu-rep --page details > "$OUT/ncu.txt" 2>&1
ncu --import /tmp/b64.ncu-rep --page raw --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,sm__cycles_active.avg,\
sm__cycles_elapsed.avg > "$OUT/ncu-metrics.csv" 2>&1
python3 benchmarks/decode/ncu_summary.py "$OUT/ncu-metrics.csv" | tee "$OUT/summary.txt"
keys="^  [a-z_:]|Duration|DRAM Throughput|Memory Throughput|Mem Busy|Max Bandwidth|L2 Hit Rate|L1/TEX Hit|Grid Size"
keys="$keys|Block Size|Cluster Size|Registers Per|Achieved Occupancy|Theoretical Occupancy|Waves Per SM"
keys="$keys|Warp Cycles Per Issued|Dynamic Shared"
grep -E "$keys" "$OUT/ncu.txt" | cut -c1-150 | head -120
