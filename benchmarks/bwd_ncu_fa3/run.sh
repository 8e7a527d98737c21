#!/usr/bin/env bash
# Nsight Compute beside FA3 for the backward rows furthest behind it (issue 46): ours and FA3's main backward kernel,
# one call each (drive.py), hdim 64 and 128, causal, 4k (batch 4), fp16: speed of light, compute and memory workload,
# warp states (the stall reasons), scheduler and instruction stats, occupancy. One nvidia-h200 call from the repo root
# after the wheel line, carrying .whl and .device/fa3; each profile's text under $OUT, the headline metrics last:
#   OUT=$OUT [HDIMS="64 128"] [LIMIT=420] bash benchmarks/bwd_ncu_fa3/run.sh
# STALLS=1 profiles the warp stall reasons instead (average warps stalled per issue, by reason), and SOURCE="128" adds,
# for those head dims, each SASS instruction's executed count and stall samples (ncu's source page, CSV).
# DIRECTION=fwd profiles the main forward kernels instead (ours of both causal modes, FA3's fwd slice), CAUSAL="on off"
# (default on; the backward one of on / off) the causal modes, SEQLEN (default 4096) the length; files then carry the
# mode (ncu-WHO-HDIM-on.txt), but for the backward's causal default, whose names stay as before.
. "$(dirname "$0")/../study_start.sh"
set -uo pipefail
mkdir -p "$OUT"; LIMIT=${LIMIT:-420}; HDIMS=${HDIMS:-"64 128"}
DIRECTION=${DIRECTION:-bwd}; CAUSAL=${CAUSAL:-on}; SEQLEN=${SEQLEN:-4096}
case "$DIRECTION" in bwd) OURS_K="regex:hopper::bwd_kernel<"; FA3_K="regex:FlashAttnBwdSm90"; DIRS=fwd,bwd; OURS_C=on ;;
  fwd) OURS_K="regex:hopper::fwd_kernel<"; FA3_K="regex:FlashAttnFwdSm90"; DIRS=fwd; OURS_C=both ;;
  *) echo "DIRECTION=$DIRECTION: bwd or fwd"; exit 2 ;; esac
for causal in $CAUSAL; do
  case "$causal" in on|off) ;; *) echo "CAUSAL=$CAUSAL: give on, off or both (\"on off\")"; exit 2 ;; esac
done
if [ "$DIRECTION" = bwd ]; then  # drive.py loads the backward of one causal mode: build that one
  case "$CAUSAL" in on|off) OURS_C=$CAUSAL ;; *) echo "CAUSAL=$CAUSAL: the backward takes one mode, on or off"; exit 2 ;; esac
fi
t0=$(date +%s); left() { echo $(( LIMIT - ($(date +%s) - t0) )); }
TREE=/tmp/fa3/flash-attention-0251105a
mkdir -p /tmp/fa3; [ -d "$TREE" ] || tar -C /tmp/fa3 -xzf .device/fa3/flash-attention-0251105a-hopper-cutlass-7127592.tar.gz
H=$(echo $HDIMS | tr ' ' ',')
( timeout $(( LIMIT - 150 )) python3 -m flashbuild build --source "$TREE" --profile flash-attn-3 --hdim "$H" --dtype fp16 \
    --arch native --direction $DIRS --features cluster --jobs 10 > "$OUT/build-fa3.txt" 2>&1 ) &
( timeout $(( LIMIT - 150 )) python3 -m flashbuild build --hdim "$H" --dtype fp16 --arch native --direction $DIRS \
    --causal $OURS_C --features none --jobs 6 > "$OUT/build-ours.txt" 2>&1 ) &
wait; echo "== builds at $(( $(date +%s) - t0 )) s"; tail -qn 1 "$OUT"/build-*.txt
SECTIONS=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats
          --section InstructionStats --section Occupancy --section LaunchStats)
[ "${STALLS:-0}" = 1 ] && SECTIONS=(--section WarpStateStats --section InstructionStats
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed_op_.*\.sum")
for h in $HDIMS; do
  for causal in $CAUSAL; do
    flag=$([ "$causal" = on ] && echo --causal || true)
    sfx=$([ "$DIRECTION" = bwd ] && [ "$CAUSAL" = on ] && echo "" || echo "-$causal")
    drive=(python3 benchmarks/bwd_ncu_fa3/drive.py --hdim $h --build-hdims "$H" --direction $DIRECTION --seqlen $SEQLEN $flag)
    for who in ours fa3; do
      [ "$(left)" -gt 25 ] || { echo "== $who $h $causal: no time left"; continue; }
      name=$([ $who = ours ] && echo "$OURS_K" || echo "$FA3_K")
      timeout $(( $(left) - 5 )) ncu --clock-control none --kernel-name-base demangled -k "$name" --launch-skip 1 --launch-count 1 \
        "${SECTIONS[@]}" "${drive[@]}" --who $who > "$OUT/ncu-$who-$h$sfx.txt" 2>&1
      echo "== $who hdim $h causal $causal rc $? at $(( $(date +%s) - t0 )) s"
      if [[ " ${SOURCE:-} " == *" $h "* ]] && [ "$(left)" -gt 25 ]; then
        timeout $(( $(left) - 5 )) ncu --clock-control none --kernel-name-base demangled -k "$name" --launch-skip 1 --launch-count 1 \
          --section SourceCounters --page source --csv --print-source sass "${drive[@]}" --who $who \
          > "$OUT/source-$who-$h$sfx.csv" 2>&1
        echo "== source $who hdim $h causal $causal rc $? at $(( $(date +%s) - t0 )) s"; gzip -f "$OUT/source-$who-$h$sfx.csv"
      fi
    done
  done
done
for f in "$OUT"/ncu-*.txt; do
  echo "-- $(basename "$f" .txt)"
  grep -E "^\s+(Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued Instruction|Executed Ipc Active|L1/TEX Hit Rate|DRAM Throughput)\b" "$f" | sed 's/  */ /g'
  grep -E "issue_stalled_" "$f" | sed 's/  */ /g; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' \
    | sort -k3 -g -r | head -8
done
