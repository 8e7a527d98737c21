# The device call of 2026-11-29 (nvidia-h200, tree at 43cadad, its run.sh and ab.py; 124 s of command
# wall time, about 154 s of device time with the machine's start), from /work/main with the tree copied under
# .device/w46l and carry [".whl", ".device/w46l"]:
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && cd .device/w46l && export PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc; OUT=$OUT BUDGET=220 bash benchmarks/hopper_bwd_uniform/run.sh
