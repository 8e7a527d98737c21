"""The current-numbers table of benchmarks/README.md, generated from the committed bench JSON of the
latest run of each direction on the current kernels (RUNS below; change it when a newer run replaces
one, and move the old run's write-up lines to archive/README.md).

    python3 benchmarks/current.py            # print the table
    python3 benchmarks/current.py --write    # rewrite it in benchmarks/README.md, between its markers
    python3 benchmarks/current.py --check    # exit 1 when benchmarks/README.md's table differs

Each row: ours / cuDNN (SDPA's cuDNN backend, timed in turns in the same run) at 1k / 4k / 16k tokens
per sequence, fp16 and bf16, and the fp16 TFLOPS at 16k of ours and cuDNN. No GPU needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from flashbuild.debug.bench import load_results  # noqa: E402

# (direction, run's bench JSON relative to benchmarks/, what the run was): the latest run of each direction
# on the current kernels.
RUNS = (
    ("fwd", "checks/merged-15/results/headline/bench-fwd.json",
     "the forward at every head dim, H200, 2026-11-30 (main at 8f8e4b3 with hdim 96's backward dQ halves), 30 reps"),
    ("bwd", "checks/merged-15/results/headline/bench-bwd.json",
     "the Hopper backward at every head dim it serves, H200, 2026-11-30 (the same tree and call), 15 reps"),
)
SEQLENS = (1024, 4096, 16384)
BEGIN, END = "<!-- current.py: begin (generated: python3 benchmarks/current.py --write) -->", "<!-- current.py: end -->"


def table() -> str:
    lines = ["| direction | hdim | causal | ours / cuDNN, fp16, 1k / 4k / 16k | bf16 | fp16 TFLOPS at 16k, ours / cuDNN |",
             "| --- | --- | --- | --- | --- | --- |"]
    sources = []
    for direction, path, what in RUNS:
        info, results = load_results(HERE / path, flag="benchmarks/current.py")
        ms = {(r.backend, r.hdim, r.causal, r.dtype, r.seqlen): r for r in results if r.direction == direction}
        keys = sorted({(r.hdim, r.causal) for r in results if r.direction == direction})

        def ratio(hdim, causal, dtype, seqlen):
            ours, cudnn = ms.get(("flashbuild", hdim, causal, dtype, seqlen)), ms.get(("sdpa-cudnn", hdim, causal, dtype, seqlen))
            return f"{ours.tflops / cudnn.tflops:.2f}" if ours and cudnn and ours.tflops and cudnn.tflops else "n/a"

        for hdim, causal in keys:
            per_dtype = [" / ".join(ratio(hdim, causal, dtype, s) for s in SEQLENS) for dtype in ("fp16", "bf16")]
            ours, cudnn = ms.get(("flashbuild", hdim, causal, "fp16", 16384)), ms.get(("sdpa-cudnn", hdim, causal, "fp16", 16384))
            tflops = f"{ours.tflops:.1f} / {cudnn.tflops:.1f}" if ours and cudnn and ours.tflops and cudnn.tflops else "n/a"
            lines.append(f"| {direction} | {hdim} | {'yes' if causal else 'no'} | {per_dtype[0]} | {per_dtype[1]} | {tflops} |")
        sources.append(f"- {direction}: `{path}` ({what}; `{info.get('command', '')}`)")
    return "\n".join(lines + ["", "Runs:", *sources])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the table in benchmarks/README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when benchmarks/README.md's table differs")
    args = parser.parse_args()
    text = table()
    if not (args.write or args.check):
        print(text)
        return 0
    readme = HERE / "README.md"
    doc = readme.read_text()
    if BEGIN not in doc or END not in doc:
        print(f"{readme}: no {BEGIN} ... {END} markers; add them where the table goes", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{text}\n{END}{tail}"
    if args.check:
        if new != doc:
            print(f"{readme}: the current-numbers table differs from the runs; run python3 benchmarks/current.py --write",
                  file=sys.stderr)
            return 1
        return 0
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
