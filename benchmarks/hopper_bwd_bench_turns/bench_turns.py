"""run.sh's table: for each variant and seqlen, each arm's median TFLOPS over its rounds (`r<round>-<arm>.json`,
`flashbuild bench --json`), its ratio to the first arm's, and the ratio of ours / cuDNN (each run's own cuDNN) to
the first arm's; then each round's ratio, arm by arm.

    python3 benchmarks/hopper_bwd_bench_turns/bench_turns.py OUT_DIR base ARM [ARM ...]
"""
import sys

if sys.argv[1:] in (["-h"], ["--help"]) or len(sys.argv) < 4:  # usage without a GPU (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import json  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402

out, arms = pathlib.Path(sys.argv[1]), sys.argv[2:]
runs = {}  # arm -> round -> {(variant, seqlen, backend): tflops}
for arm in arms:
    for path in sorted(out.glob(f"r*-{arm}.json")):
        rnd = int(path.name[1:].split("-", 1)[0])
        runs.setdefault(arm, {})[rnd] = {(x["variant"], x["seqlen"], x["backend"]): x["tflops"]
                                         for x in json.loads(path.read_text())["results"]}
base = arms[0]
if base not in runs:
    sys.exit(f"bench_turns.py: no r*-{base}.json under {out}")
rows = sorted({(v, s) for r in runs[base].values() for (v, s, b) in r if b == "flashbuild"})
print(f"{'variant':<28} {'seqlen':>6} {base + ' TF':>9}" + "".join(f" {a + '/' + base:>14} {'per cuDNN':>10}"
                                                               for a in arms[1:]) + "  rounds")
for variant, seqlen in rows:
    def series(arm, per_cudnn=False):
        vals = []
        for rnd in sorted(runs.get(arm, {})):
            r = runs[arm][rnd]
            ours, cudnn = r.get((variant, seqlen, "flashbuild")), r.get((variant, seqlen, "sdpa-cudnn"))
            if ours and (cudnn or not per_cudnn):
                vals.append(ours / cudnn if per_cudnn else ours)
        return vals
    line = f"{variant:<28} {seqlen:>6} {statistics.median(series(base)):>9.1f}"
    notes = []
    for arm in arms[1:]:
        a, b = series(arm), series(base)
        ac, bc = series(arm, True), series(base, True)
        if not a or not b:
            line += f" {'-':>14} {'-':>10}"
            continue
        line += f" {statistics.median(a) / statistics.median(b):>14.3f}"
        line += f" {statistics.median(ac) / statistics.median(bc) if ac and bc else float('nan'):>10.3f}"
        notes.append(f"{arm}: " + " ".join(f"{x / y:.3f}" for x, y in zip(a, b)))
    print(line + "  " + "; ".join(notes))
