"""Where a TU's compile seconds go: nvcc's phases, read from the CSV that `nvcc --time FILE` writes
(issue 17). One row per phase run; we fold them into the phases a kernel engineer can act on
(preprocessing, cudafe++, cicc, ptxas, fatbinary, host compiler) and tabulate them per TU.

`flashbuild build --profile-compile` adds NVCC_FLAG to the kernel TUs' nvcc flags: nvcc appends one
row per phase to a CSV in the build dir (ninja's cwd). Being an nvcc flag it is part of the build
key, so a profiled build lives in its own build dir and a normal build's command lines (and so its
objects) are never touched by it.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

CSV_NAME = "nvcc_time.csv"
NVCC_FLAG = f"--time={CSV_NAME}"
PHASES = ("preprocessing", "cudafe++", "cicc", "ptxas", "fatbinary", "host compiler", "other")


def phase_of(tool_phase: str) -> str:
    """nvcc's phase name -> ours: `gcc (preprocessing 4)` is preprocessing, `gcc (compiling)` the
    host compile of the cudafe'd source; nvcc's own driver time and unknown tools are `other`."""
    name = tool_phase.strip()
    if "preprocessing" in name:
        return "preprocessing"
    if name.endswith("(compiling)"):
        return "host compiler"
    return name if name in PHASES else "other"


def parse_nvcc_time(text: str) -> dict[str, float]:
    """phase -> seconds, summed over the rows of one `nvcc --time` CSV (several archs or several
    preprocessing passes add up). Rows whose unit is not ms are refused, not guessed."""
    totals = {phase: 0.0 for phase in PHASES}
    rows = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = [cell.strip() for cell in next(rows, [])]
    if "phase name" not in header or "metric" not in header:
        raise ValueError(f"not an `nvcc --time` CSV: header is {header!r}")
    phase_col, metric_col, unit_col = header.index("phase name"), header.index("metric"), header.index("unit")
    for row in rows:
        if len(row) <= unit_col:
            continue
        unit = row[unit_col].strip()
        if unit != "ms":
            raise ValueError(f"`nvcc --time` row {row!r}: unit {unit!r}, expected ms")
        totals[phase_of(row[phase_col])] += float(row[metric_col]) / 1000.0
    return totals


def parse_by_source(text: str) -> dict[str, dict[str, float]]:
    """TU (the source file's stem) -> phase seconds, from a CSV that several nvcc runs appended to.
    nvcc's driver row names no source and is left out."""
    lines = text.splitlines()
    if not lines:
        return {}
    header, by_source = lines[0], {}
    for line in lines[1:]:
        source = line.split(",", 1)[0].strip()
        if source and line != header:  # two nvcc runs that found no file each wrote the header
            by_source.setdefault(Path(source).stem, []).append(line)
    return {name: parse_nvcc_time("\n".join([header, *rows])) for name, rows in sorted(by_source.items())}


def read_profiles(paths: dict[str, Path]) -> dict[str, dict[str, float]]:
    """TU name -> phase seconds, for the TUs whose CSV exists (a TU ninja skipped has none)."""
    return {name: parse_nvcc_time(path.read_text()) for name, path in sorted(paths.items()) if path.is_file()}


def format_table(profiles: dict[str, dict[str, float]]) -> str:
    """A fixed-width table: one row per TU, one column per phase, a total column and a sum row."""
    width = max([len("TU"), len("total"), *map(len, profiles)])
    lines = [f"{'TU':<{width}} " + " ".join(f"{p:>13}" for p in PHASES) + f" {'total':>8}"]
    sums = {phase: 0.0 for phase in PHASES}
    for name, phases in profiles.items():
        lines.append(f"{name:<{width}} " + " ".join(f"{phases[p]:>12.1f}s" for p in PHASES)
                     + f" {sum(phases.values()):>7.1f}s")
        for phase in PHASES:
            sums[phase] += phases[phase]
    lines.append(f"{'total':<{width}} " + " ".join(f"{sums[p]:>12.1f}s" for p in PHASES)
                 + f" {sum(sums.values()):>7.1f}s")
    return "\n".join(lines)
