"""`flashbuild bench`: TFLOPS and ms of the variants a build holds, side by side with PyTorch SDPA's
flash, cuDNN and efficient backends, measured in the same run.

The standard (docs/product.md): 16k tokens per batch (batch = 16384 / seqlen), model dim 2048
(nheads = 2048 / head dim), fwd FLOPs = 4 * b * h * s^2 * d (halved when causal), bwd = 2.5 x fwd.
A feature variant (*_local, *_softcap) runs only for calls that ask for its features, so it is
measured with --window L,R and/or --softcap X (and skipped without them). With a window, the
FLOPs count only the (query, key) pairs the mask lets through: 4 * d per visible pair, per head
and batch, summed exactly over the rows. SDPA has no softcap (n/a); a window reaches it as a
boolean attn_mask, which its flash backend refuses (n/a).
Timing: CUDA events around each call, warm-up first, the median over many reps, the backends in
turns (one call of each per round, so that a drift of the GPU's clocks weighs on all alike), and
inputs rotated over enough sets that together they exceed twice the L2 cache, so no rep reads the
last one's inputs from L2. Our backward is timed as the mha_bwd call given precomputed out and
lse; SDPA's as autograd.grad of its output. A backend that refuses a shape is reported as n/a.

The problem sizes, FLOPs, tables, CSV/JSON, the comparison and the plot are pure functions of
result rows, so they run (and are tested) without a GPU.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
import textwrap
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import safe_io
from ..errors import ResultsFormatError
from ..selection.variants import Variant, feature_kwargs

TOKENS = 16384
MODEL_DIM = 2048
BWD_FLOP_FACTOR = 2.5
DEFAULT_SEQLENS = (1024, 2048, 4096, 8192, 16384)
DEFAULT_REPS = 30
WARMUP = 5
REGRESSION_PCT = 5.0  # a row this much slower than before is marked a regression
JSON_FORMAT = "flashbuild-bench"
OURS = "flashbuild"
SDPA_BACKENDS = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION",
                 "sdpa-efficient": "EFFICIENT_ATTENTION"}
BACKENDS = (OURS, *SDPA_BACKENDS)
DIRECTIONS = ("fwd", "bwd")  # split-KV decoding needs decode shapes, not the 16k-token standard


# ---------------------------------------------------------------- problems and FLOPs

@dataclass(frozen=True)
class Problem:
    direction: str
    hdim: int
    dtype: str
    causal: bool
    seqlen: int
    batch: int
    nheads: int
    window: tuple[int, int] = (-1, -1)  # the calls' window_size; (-1, -1) is none
    softcap: float = 0.0

    def feature_kwargs(self) -> dict[str, Any]:
        """The raw functions' keywords for this problem's window and softcap (none for a plain one)."""
        return feature_kwargs(self.window, self.softcap)


def problem(variant: Variant, seqlen: int, window: tuple[int, int] = (-1, -1), softcap: float = 0.0) -> Problem:
    return Problem(variant.direction, variant.hdim, variant.dtype, variant.causal, seqlen,
                   batch=max(1, TOKENS // seqlen), nheads=max(1, MODEL_DIM // variant.hdim),
                   window=tuple(window), softcap=softcap)


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool, window: tuple[int, int]) -> int:
    """How many (query, key) pairs the mask lets through: flash-attn's bottom-right rule, query i
    seeing keys i + seqlen_k - seqlen_q - left .. i + seqlen_k - seqlen_q + right (-1: unbounded;
    causal: right = 0), counted row by row."""
    left, right = window
    if causal:
        right = 0
    total = 0
    for i in range(seqlen_q):
        at = i + seqlen_k - seqlen_q
        first = max(0, at - left) if left >= 0 else 0
        last = min(seqlen_k - 1, at + right) if right >= 0 else seqlen_k - 1
        total += max(0, last - first + 1)
    return total


def flops(p: Problem) -> float:
    """The standard's count without a window; with one, 4 * d per visible (query, key) pair."""
    if p.window != (-1, -1):
        fwd = 4.0 * p.batch * p.nheads * p.hdim * visible_pairs(p.seqlen, p.seqlen, p.causal, p.window)
    else:
        fwd = 4.0 * p.batch * p.nheads * p.seqlen * p.seqlen * p.hdim
        if p.causal:
            fwd /= 2
    return fwd * (BWD_FLOP_FACTOR if p.direction == "bwd" else 1.0)


def features_asked(window: tuple[int, int], softcap: float) -> tuple[str, ...]:
    """The features that --window / --softcap ask for."""
    return tuple(f for f, on in (("local", tuple(window) != (-1, -1)), ("softcap", bool(softcap))) if on)


def features_for(variant: Variant, window: tuple[int, int], softcap: float) -> dict[str, Any]:
    """measure()'s window and softcap for a variant: a plain variant runs plain calls; a feature
    variant, the asked features it holds."""
    return {"window": tuple(window) if "local" in variant.features else (-1, -1),
            "softcap": softcap if "softcap" in variant.features else 0.0}


def parse_window(text: str) -> tuple[int, int]:
    """'256,0' -> (256, 0): left and right, each -1 (unbounded) or >= 0, not both -1."""
    parts = [part.strip() for part in text.split(",")]
    try:
        window = tuple(int(part) for part in parts)
    except ValueError:
        window = ()
    if len(window) != 2 or min(window) < -1 or window == (-1, -1):
        raise ValueError(f"--window {text}: expected LEFT,RIGHT, each -1 (unbounded) or a number of keys >= 0, "
                         f"not both -1 (e.g. --window 256,0)")
    return window


def tflops(p: Problem, ms: float) -> float:
    return flops(p) / (ms * 1e-3) / 1e12


def parse_seqlens(text: str) -> tuple[int, ...]:
    """'1024,2k,16384' -> (1024, 2048, 16384)."""
    out = []
    for item in (i.strip().lower() for i in text.split(",") if i.strip()):
        scale = 1024 if item.endswith("k") else 1
        digits = item[:-1] if item.endswith("k") else item
        if not (digits.isascii() and digits.isdigit()) or int(digits) == 0:  # int() takes '²' and '٦٤'; we do not
            raise ValueError(f"--seqlens {text}: {item!r} is not a positive sequence length (e.g. --seqlens 1024,4k,16k)")
        out.append(int(digits) * scale)
    if not out:
        raise ValueError(f"--seqlens {text!r}: empty; give e.g. --seqlens 1024,4096,16384")
    return tuple(dict.fromkeys(out))


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


# ---------------------------------------------------------------- measuring (GPU)

def time_in_turns(runs: dict[str, Callable[[int], Any]], n_sets: int, reps: int,
                  sync: Callable[[], None] | None = None) -> dict[str, float]:
    """Median ms of each run(i % n_sets) over `reps` calls, each between two CUDA events. The runs
    take turns, one call of each per round: the GPU's clocks follow its power draw, and a state
    that drifts during a measurement (after a heavy row, say) then weighs on every backend alike,
    not on whichever was timed first (benchmarks/fwd_persistent/README.md, section 3). Warm the runs up
    first."""
    import torch

    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(reps)] for name in runs}
    for i in range(reps):
        for name, run in runs.items():
            start, end = events[name][i]
            start.record()
            run((i + WARMUP) % n_sets)
            end.record()
    (sync or torch.cuda.synchronize)()
    return {name: statistics.median(s.elapsed_time(e) for s, e in pairs) for name, pairs in events.items()}


def input_sets(p: Problem, dtype, l2_bytes: int, *, with_grad: bool) -> int:
    """How many input sets rotate past L2: together more than twice its size, at least 2."""
    elem = 2
    per_set = p.batch * p.seqlen * p.nheads * p.hdim * elem * (5 if with_grad else 4)  # q k v out (dout)
    return max(2, math.ceil(2 * l2_bytes / per_set) + 1)


def _reference_out_lse(q, k, v, causal: bool, window: tuple[int, int] = (-1, -1), softcap: float = 0.0):
    """out and lse for timing mha_bwd when the build holds no matching fwd kernel: the fp32
    reference, one head at a time (s x s scores of one head fit; all heads at once may not)."""
    import torch
    from ..reference import attention_ref

    outs, lses = [], []
    for h in range(q.shape[2]):
        out, lse = attention_ref(q[:, :, h:h + 1], k[:, :, h:h + 1], v[:, :, h:h + 1], causal, window_size=window,
                                 softcap=softcap)
        outs.append(out.to(q.dtype))
        lses.append(lse)
    return torch.cat(outs, dim=2), torch.cat(lses, dim=1)


def measure(module, variant: Variant, seqlen: int, *, reps: int, has_fwd: bool,
            backends: Iterable[str] = BACKENDS, log: Callable[[str], None] = lambda m: None,
            window: tuple[int, int] = (-1, -1), softcap: float = 0.0,
            peers: dict[str, Any] | None = None, device: str = "cuda") -> list[Result]:
    """Every backend on one problem (with the calls' window and softcap, if any), timed in turns
    (time_in_turns); a backend that raises while it warms up is n/a, its note the exception and the
    warnings before it (SDPA says why it refuses a shape only in warnings). `peers` (name: an
    external tree's slice behind its adapter, e.g. FA3's) are measured as flashbuild's own build is,
    in the same turns; a peer without this variant is n/a. device: "cuda" (CUDA events); the tests
    pass "cpu", with torch.cuda.Event stood in for."""
    peers = peers or {}
    backends = backend_order([*backends, *peers])
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    from ..reference import hidden_keys

    p = problem(variant, seqlen, window, softcap)
    features = p.feature_kwargs()
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[variant.dtype]
    cuda = str(device).startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 64 << 20) if cuda \
        else 64 << 20
    bwd = variant.direction == "bwd"
    n_sets = input_sets(p, dtype, l2, with_grad=bwd)
    shape = (p.batch, p.seqlen, p.nheads, p.hdim)
    sets = [[torch.randn(shape, device=device, dtype=dtype) for _ in range(4 if bwd else 3)] for _ in range(n_sets)]

    def make_run(backend: str) -> Callable[[int], Any]:
        if backend == OURS or backend in peers:
            ext = module if backend == OURS else peers[backend]
            if backend != OURS and variant.name not in ext.variants():
                raise ValueError(f"the {backend} slice has no {variant.name}")
            fwd_built = has_fwd if backend == OURS else variant.name.replace("bwd_", "fwd_", 1) in ext.variants()
            if not bwd:
                def run(i):
                    q, k, v = sets[i]
                    ext.flash_attn_func(q, k, v, causal=p.causal, **features)
            else:
                saved = []
                for q, k, v, dout in sets:
                    o, lse = (ext.flash_attn_func(q, k, v, causal=p.causal, return_lse=True, **features) if fwd_built
                              else _reference_out_lse(q, k, v, p.causal, p.window, p.softcap))
                    saved.append((dout, q, k, v, o, lse))

                def run(i):
                    ext.mha_bwd(*saved[i], causal=p.causal, **features)
        else:
            if p.softcap:
                raise ValueError("SDPA has no softcap")
            kernel = getattr(SDPBackend, SDPA_BACKENDS[backend])
            # SDPA takes (batch, nheads, seqlen, head_dim); the bench's seqlen_q == seqlen_k, so its
            # top-left causal mask is ours. A window goes in as a boolean mask (True: take part).
            tsets = [[t.transpose(1, 2).contiguous() for t in s] for s in sets]
            hidden = hidden_keys(p.seqlen, p.seqlen, p.causal, p.window, device=device) if p.window != (-1, -1) else None
            mask = dict(attn_mask=~hidden) if hidden is not None else dict(is_causal=p.causal)
            if not bwd:
                def run(i):
                    q, k, v = tsets[i]
                    with sdpa_kernel(kernel):
                        F.scaled_dot_product_attention(q, k, v, **mask)
            else:
                graphs = []
                for q, k, v, dout in tsets:
                    leaves = [t.requires_grad_() for t in (q, k, v)]
                    with sdpa_kernel(kernel):
                        o = F.scaled_dot_product_attention(*leaves, **mask)
                    graphs.append((o, leaves, dout))

                def run(i):
                    o, leaves, dout = graphs[i]
                    torch.autograd.grad(o, leaves, dout, retain_graph=True)
        return run

    runs: dict[str, Callable[[int], Any]] = {}
    missing: dict[str, str] = {}
    for backend in backends:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            try:
                run = make_run(backend)
                for i in range(WARMUP):
                    run(i % n_sets)
                runs[backend] = run
            except Exception as exc:  # noqa: BLE001 - any backend that cannot run this problem is n/a, named
                missing[backend] = _refusal(exc, [str(w.message) for w in said])
            finally:
                sync()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ms = time_in_turns(runs, n_sets, reps, sync) if runs else {}
    out = [result(variant, p, b, ms[b], reps) if b in ms else result(variant, p, b, None, 0, missing[b])
           for b in backends]
    for r in out:
        log(f"  {variant.name} seqlen {seqlen} {r.backend}: {_cell(r)}")
    del sets, runs
    if cuda:
        torch.cuda.empty_cache()
    return out


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else ""


def _refusal(exc: Exception, warned: list[str]) -> str:
    """A backend's n/a note: its exception, and the warnings before it (SDPA raises "No available
    kernel" and says why in warnings: "Flash attention kernel not used because:", then each reason).
    An exception that is not a RuntimeError or ValueError (an adapter's AttributeError, say) is
    named with its type."""
    said = _first_line(str(exc))
    if not isinstance(exc, (RuntimeError, ValueError)) or not said:
        said = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
    reasons = [line for line in dict.fromkeys(_first_line(w) for w in warned) if line and line not in said]
    return (f"{said} ({'; '.join(reasons)})" if reasons else said)[:300]
