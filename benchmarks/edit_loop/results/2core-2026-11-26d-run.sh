cd /work/main
export FLASHBUILD_ROOT=/tmp/el3/root FLASHBUILD_CACHE_DIR=/tmp/el3/cache
S=$(date +%s.%N)
/usr/bin/time -v python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 --compile-only > /tmp/el3/cold.txt 2>&1
E=$(date +%s.%N); echo "cold main job (compile-only, 2 jobs): $(python3 -c "print(round($E-$S,1))") s" >> /tmp/el3/cold.txt
PYTHONPATH=$PWD python3 benchmarks/edit_loop/watch_rounds_compile_only.py /tmp/el3/rounds.jsonl hopper/mainloop.h hopper/epilogue.h hopper/bwd_mainloop.h > /tmp/el3/rounds.txt 2>&1
echo done >> /tmp/el3/rounds.txt
