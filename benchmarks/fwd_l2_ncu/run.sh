#!/usr/bin/env bash
# Issue 46, the forward's lead left in ../fwd_sass_fa3/ (K/V multicast in 2-CTA clusters): how near its limit does
# each forward kernel run the L2, ours and FA3's (hopper/ 0251105a through the flash-attn-3 profile with its cluster
# switch, which runs its non-causal hdim >= 128 kernels as 2-CTA clusters with K/V multicast; its causal kernels have
# no cluster, a control)? Nsight Compute on the main forward kernel of one call each (../bwd_ncu_fa3/drive.py
# --direction fwd: a warm-up call, then the profiled one), fp16, 16k tokens, model dim 2048, causal both. One
# nvidia-h200 call from the repo root after the wheel line, carrying .whl and .device/fa3:
#   OUT=$OUT [HDIMS="128 256"] [CAUSAL="off on"] [SEQLEN=16384] [LIMIT=420] [CLOCKS=none] bash benchmarks/fwd_l2_ncu/run.sh
# CLOCKS is ncu's --clock-control: none (the default since h200-2) leaves the card's clocks alone; h200-1 ran ncu's own
# default (base), which locks the SM clock at its base for each profile. The headline metrics last; each profile's
# text packed into $OUT/ncu-profiles.tgz (ncu-WHO-HDIM-CAUSAL.txt: a call brings back at most 8 files).
. "$(dirname "$0")/../study_start.sh"
set -o pipefail
LIMIT=${LIMIT:-420}; HDIMS=${HDIMS:-"128 256"}; CAUSAL=${CAUSAL:-"off on"}; SEQLEN=${SEQLEN:-16384}
CLOCKS=${CLOCKS:-none}
left() { echo $(( LIMIT - ($(date +%s) - t0) )); }
TREE=/tmp/fa3/flash-attention-0251105a
mkdir -p /tmp/fa3; [ -d "$TREE" ] || tar -C /tmp/fa3 -xzf .device/fa3/flash-attention-0251105a-hopper-cutlass-7127592.tar.gz
H=$(echo $HDIMS | tr ' ' ',')
# The selections drive.py loads (fwd: FA3's fwd slice with cluster, ours fwd of both causal modes).
( timeout $(( LIMIT - 150 )) python3 -m flashbuild build --source "$TREE" --profile flash-attn-3 --hdim "$H" --dtype fp16 \
    --arch native --direction fwd --features cluster --jobs 10 > "$OUT/build-fa3.txt" 2>&1 ) &
( timeout $(( LIMIT - 150 )) python3 -m flashbuild build --hdim "$H" --dtype fp16 --arch native --direction fwd \
    --causal both --features none --jobs 6 > "$OUT/build-ours.txt" 2>&1 ) &
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.txt
# L2: its busiest unit against its peak, and the bytes it served a second; DRAM's reads; the SMs' busiest pipe.
METRICS=gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second
METRICS=$METRICS,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
for h in $HDIMS; do
  for causal in $CAUSAL; do
    for who in ours fa3; do
      [ "$(left)" -gt 25 ] || { echo "== $who $h causal $causal: no time left"; continue; }
      name=$([ $who = ours ] && echo "regex:hopper::fwd_kernel<" || echo "regex:FlashAttnFwdSm90")
      flag=$([ $causal = on ] && echo --causal || true)
      timeout $(( $(left) - 5 )) ncu --clock-control "$CLOCKS" --kernel-name-base demangled -k "$name" --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics "$METRICS" \
        python3 benchmarks/bwd_ncu_fa3/drive.py --direction fwd --who $who --hdim "$h" --seqlen "$SEQLEN" \
        --build-hdims "$H" $flag > "$OUT/ncu-$who-$h-$causal.txt" 2>&1
      echo "== $who hdim $h causal $causal rc $? $(at)"
    done
  done
done
for f in "$OUT"/ncu-*.txt; do
  echo "-- $(basename "$f" .txt)"
  grep -E "^\s+(Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|Memory Throughput)\b" "$f" \
    | sed 's/  */ /g'
  grep -E "^\s+(lts__|dram__|sm__throughput)" "$f" | sed 's/  */ /g'
done
( cd "$OUT" && tar czf ncu-profiles.tgz ncu-*.txt && rm ncu-*.txt )
