# The start of a study's device script, sourced first thing (`. "$(dirname "$0")/../study_start.sh"`): -h or --help
# prints the script's header comment (the lines after the shebang that start with #) and exits; else set -u, OUT
# required (the folder whose files the device call brings back) and made, Python unbuffered and without bytecode
# files, and `at`, the seconds since the start ("at N s"), for the script's progress lines.
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^[^#]/{/^#/p}' "$0" | cut -c3-
  exit 0
fi
set -u
: "${OUT:?set OUT to the output folder}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$OUT"
t0=$(date +%s)
at() { echo "at $(( $(date +%s) - t0 )) s"; }
