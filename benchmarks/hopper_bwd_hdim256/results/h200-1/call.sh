# The device call of 2026-11-29 (nvidia-h200; the tree of a3c7bbe but for comments and the switch then
# also taking hdim 192 (not built): the same hdim-256 kernels; copied under .device/w46b of
# /work/main; 72.9 s of command wall time, about 105 s of device time with the machine's start), carry
# [".whl", ".device/w46b"]:
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && cd .device/w46b && export PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc; OUT=$OUT BUDGET=225 timeout 290 bash benchmarks/hopper_bwd_hdim256/run.sh
