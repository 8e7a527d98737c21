"""`flashbuild bench`'s result rows and what is made of them: JSON and CSV, reading a results file
back (every field checked), the terminal table, the comparison with an earlier run, and the plot.
Pure functions of the rows: they run (and are tested) without a GPU."""

from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import safe_io
from ..errors import ResultsFormatError
from ..selection.variants import Variant
from .bench_problems import BACKENDS, JSON_FORMAT, OURS, REGRESSION_PCT, SDPA_BACKENDS, Problem, tflops

# ---------------------------------------------------------------- result rows

@dataclass
class Result:
    variant: str
    direction: str
    hdim: int
    dtype: str
    causal: bool
    seqlen: int
    batch: int
    nheads: int
    backend: str
    ms: float | None      # median; None when the backend refused (n/a)
    tflops: float | None
    reps: int = 0
    note: str = ""
    window_left: int = -1   # the calls' window_size (-1, -1: none)
    window_right: int = -1
    softcap: float = 0.0

    @property
    def key(self) -> tuple:
        return (self.variant, self.asked, self.seqlen, self.backend)

    @property
    def asked(self) -> str:
        """The window and softcap the calls asked for, e.g. 'window 256,0, softcap 30' ('' for none)."""
        asked = []
        if (self.window_left, self.window_right) != (-1, -1):
            asked.append(f"window {self.window_left},{self.window_right}")
        if self.softcap:
            asked.append(f"softcap {self.softcap:g}")
        return ", ".join(asked)

    @property
    def label(self) -> str:
        """The variant, and the window and softcap it was measured with."""
        return f"{self.variant} ({self.asked})" if self.asked else self.variant


REQUIRED = {f.name for f in fields(Result)} - {"reps", "note", "window_left", "window_right", "softcap"}


def result(variant: Variant, p: Problem, backend: str, ms: float | None, reps: int, note: str = "") -> Result:
    return Result(variant.name, p.direction, p.hdim, p.dtype, p.causal, p.seqlen, p.batch, p.nheads, backend,
                  ms, tflops(p, ms) if ms else None, reps, note, p.window[0], p.window[1], p.softcap)


def results_json(results: list[Result], **info: Any) -> str:
    return json.dumps({"format": JSON_FORMAT, "version": 1, **info, "results": [asdict(r) for r in results]},
                      indent=2) + "\n"


def results_csv(results: list[Result]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(Result)], lineterminator="\n")
    writer.writeheader()
    for r in results:
        writer.writerow(asdict(r))
    return out.getvalue()


def _is_int(value: Any) -> bool:  # below 2**53: a float holds it exactly (plots, sums: no OverflowError)
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53


def _is_number(value: Any) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


RESULT_DIRECTIONS = ("fwd", "bwd", "splitkv")
# What each field of a result row must hold: (check, what the error says it expects).
FIELD_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "variant": (lambda v: isinstance(v, str) and v != "", "a variant name"),
    "direction": (lambda v: v in RESULT_DIRECTIONS, f"one of {', '.join(RESULT_DIRECTIONS)}"),
    "hdim": (lambda v: _is_int(v) and v > 0, "a positive integer"),
    "dtype": (lambda v: isinstance(v, str) and v != "", "a dtype name such as fp16"),
    "causal": (lambda v: isinstance(v, bool), "true or false"),
    "seqlen": (lambda v: _is_int(v) and v > 0, "a positive integer"),
    "batch": (lambda v: _is_int(v) and v > 0, "a positive integer"),
    "nheads": (lambda v: _is_int(v) and v > 0, "a positive integer"),
    "backend": (lambda v: isinstance(v, str) and v != "", "a backend name such as flashbuild"),
    "ms": (lambda v: v is None or (_is_number(v) and v > 0), "a number of milliseconds > 0, or null (n/a)"),
    "tflops": (lambda v: v is None or (_is_number(v) and v >= 0), "a number >= 0, or null (n/a)"),
    "reps": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "note": (lambda v: isinstance(v, str), "a string"),
    "window_left": (lambda v: _is_int(v) and v >= -1, "an integer >= -1"),
    "window_right": (lambda v: _is_int(v) and v >= -1, "an integer >= -1"),
    "softcap": (lambda v: _is_number(v) and v >= 0, "a number >= 0"),
}


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def load_results(path: str | Path, flag: str = "--compare") -> tuple[dict[str, Any], list[Result]]:
    """(the file's other fields, its rows), or ResultsFormatError naming what is wrong with the file:
    unreadable, not JSON, not bench results, or the first row and field of the wrong type."""
    how = "write one with `flashbuild bench ... --json FILE`"
    where = f"{flag} {path}"
    try:
        text = safe_io.read_bytes(path).decode("utf-8")  # a regular file, size-capped: a FIFO hung here
    except OSError as exc:
        raise ResultsFormatError(f"{where}: cannot read it ({exc.strerror or exc}); {how}") from None
    except UnicodeDecodeError:
        raise ResultsFormatError(f"{where}: not a text file (expected the JSON of `flashbuild bench --json`); "
                                 f"{how}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if text.strip() else "the file is empty"
        raise ResultsFormatError(f"{where}: not JSON ({reason}); expected the results of "
                                 f"`flashbuild bench --json`; {how}") from None
    if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ResultsFormatError(f'{where}: not flashbuild bench results (format {found!r}, expected '
                                 f'"{JSON_FORMAT}"); {how}')
    rows = data.get("results")
    if not isinstance(rows, list):
        raise ResultsFormatError(f'{where}: no "results" list in it (found {_shown(rows)}); {how}')
    results = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ResultsFormatError(f"{where}: result {i} is {_shown(row)}, not an object of fields; {how}")
        missing = sorted(REQUIRED - set(row))
        if missing:
            raise ResultsFormatError(f"{where}: result {i} lacks {', '.join(missing)}; {how}")
        for name, (ok, expected) in FIELD_TYPES.items():
            if name in row and not ok(row[name]):
                raise ResultsFormatError(f'{where}: result {i} has "{name}": {_shown(row[name])}, expected '
                                         f"{expected}; fix the file or {how[0].lower()}{how[1:]}")
        results.append(Result(**{f.name: row[f.name] for f in fields(Result) if f.name in row}))
    seen: dict[tuple, int] = {}
    for i, r in enumerate(results):  # the table has one cell per key: a second row would hide the first
        key = r.key
        if key in seen:
            raise ResultsFormatError(f"{where}: results {seen[key]} and {i} measure the same thing ({r.variant}, "
                                     f"seqlen {r.seqlen}, {r.backend}); keep one, or {how[0].lower()}{how[1:]}")
        seen[key] = i
    return {k: v for k, v in data.items() if k != "results"}, results


# ---------------------------------------------------------------- terminal tables

def _cell(r: Result | None) -> str:
    if r is None:
        return "-"
    if r.ms is None:
        return "n/a"
    if r.tflops is None:  # a file may give ms without TFLOPS (null: n/a)
        return f"   n/a ({r.ms:.3f} ms)"
    return f"{r.tflops:6.1f} ({r.ms:.3f} ms)"


def backend_order(backends: Iterable[str]) -> list[str]:
    """The given backends in the one order measure() times them in and the table and plot show them:
    flashbuild, then peers (another tree's slice, by profile name), then SDPA's backends."""
    given = set(backends)
    peers = sorted(given - set(BACKENDS))
    return [b for b in (OURS, *peers, *SDPA_BACKENDS) if b in given]


def table(results: list[Result]) -> str:
    """One line per variant and seqlen: TFLOPS (ms) of each backend."""
    by_key = {r.key: r for r in results}
    problems = list(dict.fromkeys((r.variant, r.asked, r.label, r.seqlen, r.batch, r.nheads) for r in results))
    backends = backend_order(r.backend for r in results)
    width = max([len("variant")] + [len(p[2]) for p in problems])
    head = f"{'variant':<{width}}  {'seqlen':>6}  {'b x h':>7}  " + "  ".join(f"{b:>22}" for b in backends)
    lines = [head, "TFLOPS (median ms)".rjust(len(head))]
    for variant, asked, label, seqlen, batch, nheads in problems:
        cells = "  ".join(f"{_cell(by_key.get((variant, asked, seqlen, b))):>22}" for b in backends)
        lines.append(f"{label:<{width}}  {seqlen:>6}  {f'{batch}x{nheads}':>7}  {cells}")
    notes = [f"  {r.backend} {r.label} seqlen {r.seqlen}: {r.note}" for r in results if r.ms is None and r.note]
    if notes:
        lines += ["n/a:"] + notes
    return "\n".join(lines)


@dataclass
class Change:
    old: Result
    new: Result

    @property
    def pct(self) -> float | None:
        if not self.old.tflops or not self.new.tflops:
            return None
        return (self.new.tflops / self.old.tflops - 1.0) * 100

    @property
    def lost(self) -> bool:
        """Measured before, n/a now (the backend refused or failed the problem)."""
        return bool(self.old.tflops) and not self.new.tflops

    @property
    def regression(self) -> bool:
        return self.lost or (self.pct is not None and self.pct < -REGRESSION_PCT)


def compare(old: list[Result], new: list[Result]) -> tuple[list[Change], list[Result], list[Result]]:
    """(rows in both, rows only new, rows only old), matched by variant (with its window and softcap),
    seqlen and backend."""
    old_by_key = {r.key: r for r in old}
    new_keys = {r.key for r in new}
    changes = [Change(old_by_key[r.key], r) for r in new if r.key in old_by_key]
    return changes, [r for r in new if r.key not in old_by_key], [r for r in old if r.key not in new_keys]


def compare_table(changes: list[Change], only_new: list[Result], only_old: list[Result], old_name: str) -> str:
    width = max([len("variant")] + [len(c.new.label) for c in changes])
    lines = [f"change vs {old_name} (TFLOPS; a regression is more than {REGRESSION_PCT:g}% slower, or n/a now):",
             f"{'variant':<{width}}  {'seqlen':>6}  {'backend':<14}  {'old':>7}  {'new':>7}  {'change':>8}"]
    for c in changes:
        old = f"{c.old.tflops:7.1f}" if c.old.tflops else f"{'n/a':>7}"
        new = f"{c.new.tflops:7.1f}" if c.new.tflops else f"{'n/a':>7}"
        pct = f"{c.pct:+7.1f}%" if c.pct is not None else f"{'now n/a' if c.lost else '-':>8}"
        mark = "  REGRESSION" if c.regression else ""
        lines.append(f"{c.new.label:<{width}}  {c.new.seqlen:>6}  {c.new.backend:<14}  {old}  {new}  {pct}{mark}")
    regressions = [c for c in changes if c.regression]
    ours = [c for c in regressions if c.new.backend == OURS]
    lines.append(f"{len(regressions)} regression{'' if len(regressions) == 1 else 's'} "
                 f"({len(ours)} of {OURS}) in {len(changes)} matched rows")
    if only_new:
        lines.append(f"not in {old_name}: {len(only_new)} rows (e.g. {only_new[0].variant} seqlen {only_new[0].seqlen})")
    if only_old:
        lines.append(f"only in {old_name}: {len(only_old)} rows (e.g. {only_old[0].variant} seqlen {only_old[0].seqlen})")
    return "\n".join(lines)


# ---------------------------------------------------------------- plot

# What matplotlib's savefig writes (its Agg backend), by file suffix.
PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".svgz", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp",
                 ".pgf", ".raw", ".rgba")


def plot_format_problem(path: str | Path) -> str | None:
    """Why --plot cannot write this path (a suffix matplotlib has no writer for), or None."""
    suffix = Path(path).suffix.lower()
    if suffix in PLOT_SUFFIXES:
        return None
    said = f"its suffix {suffix!r}" if suffix else "it has no suffix, so"
    return f"{said} names no image format matplotlib writes ({', '.join(s[1:] for s in PLOT_SUFFIXES[:4])}, ...)"


def plot(results: list[Result], path: str | Path, title: str = "") -> Path:
    """TFLOPS vs seqlen per backend: one panel per head dim, fwd and bwd as rows of panels.
    Color is the backend, a dashed line is causal, a dotted one a window or softcap (non-causal), a
    square marker is bf16."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in results if r.tflops]
    directions = [d for d in ("fwd", "bwd", "splitkv") if any(r.direction == d for r in results)] or ["fwd"]
    hdims = sorted({r.hdim for r in results}) or [0]
    fig, axes = plt.subplots(len(directions), len(hdims), figsize=(4.2 * len(hdims), 3.4 * len(directions) + 1.0),
                             squeeze=False, sharex=True)
    colors = dict(zip(BACKENDS, ("tab:red", "tab:blue", "tab:green", "tab:orange")))
    order = backend_order(r.backend for r in measured)
    for i, direction in enumerate(directions):
        for j, hdim in enumerate(hdims):
            ax = axes[i][j]
            ax.set_title(f"{direction}, head dim {hdim}")
            lines = sorted({(r.backend, r.dtype, r.causal, r.asked) for r in measured
                            if r.direction == direction and r.hdim == hdim},
                           key=lambda k: (order.index(k[0]), k[1], k[2], k[3]))
            for backend, dtype, causal, asked in lines:
                points = sorted((r.seqlen, r.tflops) for r in measured if (r.direction, r.hdim, r.backend, r.dtype,
                                                                            r.causal, r.asked) == (
                                                                                direction, hdim, backend, dtype,
                                                                                causal, asked))
                ax.plot([p[0] for p in points], [p[1] for p in points], color=colors.get(backend, "black"),
                        linestyle="--" if causal else ":" if asked else "-", marker="s" if dtype == "bf16" else "o",
                        markersize=4, label=f"{backend} {dtype}{' causal' if causal else ''}{f' {asked}' if asked else ''}")
            ax.set_xscale("log", base=2)
            seqlens = sorted({r.seqlen for r in results})
            ax.set_xticks(seqlens, [f"{s // 1024}k" if s % 1024 == 0 else str(s) for s in seqlens])
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            if i == len(directions) - 1:
                ax.set_xlabel("seqlen (batch x seqlen = 16k tokens)")
            if j == 0:
                ax.set_ylabel("TFLOPS")
    handles = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    rows = max(1, math.ceil(len(handles) / 4))
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=4, fontsize=7, frameon=False)
    if title:
        fig.suptitle(textwrap.fill(title, 110), fontsize=8)
    fig.tight_layout(rect=(0, 0.035 * rows + 0.01, 1, 0.93 if title else 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
