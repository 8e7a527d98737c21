# Run from the repository root on the nvidia-h200 machine. Output: ncu-bwd-hdim256-shared.txt.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
python3 -m flashbuild --hdim 256 --dtype fp16 --arch sm90 --direction fwd,bwd --causal off --no-local --no-softcap -j 4 > /dev/null 2>&1
ncu --query-metrics-mode suffix --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared --chip gh100 2>&1 | head -30
M=$(ncu --query-metrics-mode all --chip gh100 2>/dev/null | grep -oE "^l1tex__data_bank_(conflicts|reads|writes)_pipe_lsu_mem_shared[a-z_]*\.sum" | sort -u | tr '\n' ',' | sed 's/,$//')
echo "M=$M"
M="$M,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_op_ldgsts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__sass_inst_executed_op_shared_st.sum,smsp__sass_inst_executed_op_ldgsts.sum,smsp__sass_inst_executed_op_local_ld.sum,smsp__sass_inst_executed_op_local_st.sum"
timeout 300 ncu --clock-control none --metrics $M -k regex:"bwd_kernel|flash_bwd_dq_dk_dv" python3 benchmarks/bwd_dq_chunks/ncu_bwd_hdim256.py > $OUT/ncu2.txt 2>&1; echo "ncu rc $?"
grep -E "bwd_kernel|flash_bwd|^\s+(l1tex__|smsp__)" $OUT/ncu2.txt | sed -E 's/ +/ /g' | cut -c1-150
