# ncu of our hdim-256 forward and FA2's, fp16 and bf16, b16 s1024 h8; from the repository root on the
# nvidia-h200 machine. Output: ncu-fwd-hdim256-1k.txt.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
python3 -m flashbuild --hdim 256 --dtype fp16,bf16 --arch sm90 --direction fwd --causal off --no-local --no-softcap -j 4 > /dev/null 2>&1
ST=""; for r in long_scoreboard barrier short_scoreboard mio_throttle math_pipe_throttle wait not_selected; do ST="$ST,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
M="gpu__time_duration.sum,sm__cycles_active.avg,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size,smsp__sass_inst_executed_op_local_ld.sum,sm__warps_active.avg.pct_of_peak_sustained_active$ST"
timeout 300 ncu --metrics $M -k regex:"fwd_kernel|flash_fwd" python3 benchmarks/archive/fwd_hdim256_1k/ncu_fwd_hdim256_1k.py > $OUT/ncu-fwd-hdim256-1k.txt 2>&1; echo "ncu rc $?"
grep -E "fwd_kernel|flash_fwd|^\s+(gpu__|smsp__|sm__|launch__)" $OUT/ncu-fwd-hdim256-1k.txt | sed -E 's/ +/ /g' | cut -c1-140
