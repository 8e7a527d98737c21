# Sourced by the one-call check scripts (merged-5/call.sh, merged-6/call.sh), not run: OUT (created), LIMIT
# (seconds for the whole call, default ${LIMIT_DEFAULT}), t0 and left() (seconds of LIMIT left), the host's
# facts in $OUT/host.txt, and FA3's tree (hopper/ 0251105a, carried as .device/fa3) unpacked at $TREE.
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/$(basename "$(dirname "$0")")}; mkdir -p "$OUT"
LIMIT=${LIMIT:-$LIMIT_DEFAULT}
t0=$(date +%s)
left() { echo $(( LIMIT - ($(date +%s) - t0) )); }
{ nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; echo "cores $(nproc)"
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"; } > "$OUT/host.txt" 2>&1
TREE=/tmp/fa3/flash-attention-0251105a
mkdir -p /tmp/fa3; [ -d "$TREE" ] || tar -C /tmp/fa3 -xzf .device/fa3/flash-attention-0251105a-hopper-cutlass-7127592.tar.gz
