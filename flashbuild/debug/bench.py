"""`flashbuild bench`: TFLOPS and ms of the variants a build holds, side by side with PyTorch SDPA's
flash, cuDNN and efficient backends, measured in the same run.

The standard (benchmarks/README.md, "How numbers are measured"): 16k tokens per batch (batch =
16384 / seqlen), model dim 2048 (nheads = 2048 / head dim), fwd FLOPs = 4 * b * h * s^2 * d (halved when causal), bwd = 2.5 x fwd.
A feature variant (*_local, *_softcap) runs only for calls that ask for its features, so it is
measured with --window L,R and/or --softcap X (and skipped without them). With a window, the
FLOPs count only the (query, key) pairs the mask lets through: 4 * d per visible pair, per head
and batch, summed exactly over the rows. SDPA has no softcap (n/a); a window reaches it as a
boolean attn_mask, which its flash backend refuses (n/a).
Timing: CUDA events around each call, warm-up first, the median over many reps, the backends in
turns (one call of each per round, so that a drift of the GPU's clocks weighs on all alike), and
inputs rotated over enough sets that together they exceed twice the L2 cache, so no rep reads the
last one's inputs from L2. In turns the backends share one clock: at the card's power limit the
ratio is the work each does per clock tick, and the energy a call takes (which sets the clock of a
kernel run alone) is left out. `alone` (time_alone) times each backend in windows of calls of its
own instead (benchmarks/README.md, "How numbers are measured"). Our backward is timed as the mha_bwd
call given precomputed out and lse; SDPA's as autograd.grad of its output. A backend that refuses a
shape is reported as n/a.

The problem sizes and FLOPs are selection-free numbers (bench_problems.py); the result rows, tables,
CSV/JSON, the comparison and the plot are pure functions of the rows (bench_results.py), so they run
(and are tested) without a GPU. This module measures, and re-exports both, so `bench.X` keeps working.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from typing import Any, Callable, Iterable

from ..errors import BuildError
from ..selection.variants import Variant
from .bench_problems import (BACKENDS, BWD_FLOP_FACTOR, DEFAULT_REPS, DEFAULT_SEQLENS, DIRECTIONS,  # noqa: F401
                             JSON_FORMAT, MODEL_DIM, OURS, REGRESSION_PCT, SDPA_BACKENDS, TOKENS, WARMUP, Problem,
                             features_asked, features_for, flops, parse_seqlens, parse_window, problem, tflops,
                             visible_pairs)
from .bench_results import (PLOT_SUFFIXES, REQUIRED, RESULT_DIRECTIONS, Change, Result, backend_order,  # noqa: F401
                            compare, compare_table, load_results, plot, plot_format_problem, result, results_csv,
                            results_json, table, _cell, _shown)

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


ALONE_ROUNDS = 3  # windows of each backend alone, the order flipped each round; the median is reported
ALONE_BATCH = 8   # calls queued between the host's looks at the clock
IN_TURNS = "in turns"


def timing_name(alone: float) -> str:
    """How a run was timed, as its --json records it ("timing"; a file without it was timed in turns)."""
    return f"alone, {ALONE_ROUNDS} windows of {alone:g} s" if alone else IN_TURNS


def timing_of(info: dict) -> str:
    """How the run a --json file holds was timed, fit to print: its "timing" as bench writes it (a file without
    one was timed in turns); any other value shown quoted and cut short (the file is the user's, not ours)."""
    value = info.get("timing", IN_TURNS)
    if isinstance(value, str) and len(value) <= 60 and value.isprintable():
        return value
    return f"an unknown way ({_shown(value)})"


def time_alone(runs: dict[str, Callable[[int], Any]], n_sets: int, seconds: float,
               sync: Callable[[], None] | None = None, rounds: int = ALONE_ROUNDS) -> tuple[dict[str, float], int]:
    """Median ms a call of each run over `rounds` windows, each window calls of that run alone for at least
    `seconds`, between two CUDA events: the GPU's clock then follows that run's own power draw, as in a long
    job of it. The runs take turns window by window, the order flipped each round, so that a drift weighs on
    all alike. Also the fewest calls a window held (the rows' reps). Warm the runs up first."""
    import torch

    sync = sync or torch.cuda.synchronize
    per_call: dict[str, list[float]] = {name: [] for name in runs}
    fewest = None
    names = list(runs)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            run = runs[name]
            sync()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            began = time.monotonic()
            start.record()
            calls = 0
            while calls == 0 or time.monotonic() - began < seconds:
                for _ in range(ALONE_BATCH):
                    run((calls + WARMUP) % n_sets)
                    calls += 1
                sync()
            end.record()
            sync()
            per_call[name].append(start.elapsed_time(end) / calls)
            fewest = calls if fewest is None else min(fewest, calls)
    return {name: statistics.median(ms) for name, ms in per_call.items()}, fewest or 0


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
            peers: dict[str, Any] | None = None, device: str = "cuda", alone: float = 0.0) -> list[Result]:
    """Every backend on one problem (with the calls' window and softcap, if any), timed in turns
    (time_in_turns), or with `alone` seconds in windows of each backend's calls alone (time_alone); a
    backend that raises while it warms up is n/a, its note the exception and the warnings before it
    (SDPA says why it refuses a shape only in warnings). `peers` (name: an external tree's slice behind
    its adapter, e.g. FA3's) are measured as flashbuild's own build is, in the same turns; a peer
    without this variant is n/a. device: "cuda" (CUDA events); the tests pass "cpu", with
    torch.cuda.Event stood in for."""
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
        if alone:
            ms, reps = time_alone(runs, n_sets, alone, sync) if runs else ({}, 0)
        else:
            ms = time_in_turns(runs, n_sets, reps, sync) if runs else {}
    out = [result(variant, p, b, ms[b], reps) if b in ms else result(variant, p, b, None, 0, missing[b])
           for b in backends]
    for r in out:
        log(f"  {variant.name} seqlen {seqlen} {r.backend}: {_cell(r)}")
    del sets, runs
    if cuda:
        torch.cuda.empty_cache()
    return out


def measure_build(module, gpu, seqlens, *, reps: int, window: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                  peers: dict | None = None, log: Callable[[str], None], alone: float = 0.0) -> list[Result]:
    """Every variant of a loaded build that this GPU runs and the bench can call, at each seqlen, beside
    the SDPA backends and `peers` (name -> a loaded peer build); what is not measured is logged with why."""
    from . import runtime

    peers = peers or {}
    built = [Variant.from_name(name) for name in module.variants()]
    here, elsewhere = runtime.runnable(built, gpu)
    if elsewhere:
        log(f"not measured here ({gpu.arch}): {', '.join(v.name for v in elsewhere)}")
    unmeasured = [v for v in here if v.direction not in DIRECTIONS]
    if unmeasured:
        log(f"not measured (the standard's shapes are for {', '.join(DIRECTIONS)}): "
            f"{', '.join(v.name for v in unmeasured)}")
        here = [v for v in here if v.direction in DIRECTIONS]
    asked = features_asked(window, softcap)
    for feature in asked:
        if not any(feature in v.features for v in here):
            log(f"--{'window' if feature == 'local' else 'softcap'}: no variant measured here has {feature} "
                f"(built without it, or with --no-{feature}): the plain variants are measured as they are")
    idle = [v for v in here if v.features and not set(v.features) & set(asked)]
    if idle:
        log(f"not measured (a feature variant runs only for calls with its features: pass --window LEFT,RIGHT "
            f"and/or --softcap X): {', '.join(v.name for v in idle)}")
        here = [v for v in here if v not in idle]
    names = {v.name for v in built}
    results = []
    log(f"measuring {len(here)} variants x {len(seqlens)} seqlens x {len(BACKENDS) + len(peers)} backends "
        f"on {gpu.describe()}, "
        + (f"each alone in {ALONE_ROUNDS} windows of {alone:g} s" if alone else f"in turns, {reps} reps"))
    try:
        for variant in here:
            has_fwd = variant.name.replace("bwd_", "fwd_", 1) in names
            features = features_for(variant, window, softcap)
            for seqlen in seqlens:
                results += measure(module, variant, seqlen, reps=reps, has_fwd=has_fwd, log=log, peers=peers,
                                   alone=alone, **features)
    except RuntimeError as exc:  # a CUDA error outside one backend's measurement leaves the context unusable
        raise BuildError(f"the benchmark stopped: {str(exc).strip().splitlines()[0]}") from None
    return results


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
