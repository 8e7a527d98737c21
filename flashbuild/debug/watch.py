"""`flashbuild watch`: on a saved kernel file, rebuild the slice and test what the change rebuilt.

Polls the modification times under kernels/ (no new dependency). The default loop stays one warm
process (issue 17): Python, torch and the CUDA context are set up once, and each round rebuilds
through the builder, loads the relinked extension fresh (pipeline/loader.py: a module of its own per
build, never the stale one) and runs `flashbuild test`'s checks on the variants whose kernel objects
ninja recompiled (every variant when the binding was, or with test_all), then prints one verdict line:

    [HH:MM:SS] rebuilt 4 TUs + link in B s; tested 36 checks of fwd_hdim64_fp16_sm90, ... in T s: pass; save->verdict S s

After a check that lost the CUDA context (an illegal address, say) the process cannot run kernels
again, so the loop restarts itself in a new process.

An external tree's slice (tree_loop) keeps the same rounds with one difference: the build runs in the
warm watching process, and the checks run in a fresh child process (`python -m flashbuild.debug.watch`),
told which variants to check: those of the units whose objects were recompiled. The tree's module
cannot be reloaded in-process (TREE_RELOAD). Each child is started a round ahead (SpareChild): it has
imported torch and opened the GPU before the save, and waits for its round. `--fresh-process` keeps the older loop: each round is
a whole `flashbuild test` in a new process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import FlashbuildError
from ..selection.variants import Variant
from ..sources.units import variant_name
from . import checking

WATCHED_SUFFIXES = {".h", ".hpp", ".cuh", ".cu", ".cpp", ".inl"}
NOT_KERNELS = ("binding", "link")  # targets of a build that are no variant's kernel object


def snapshot(root: Path) -> dict[str, int]:
    """relative path -> mtime (ns) of every source file under root."""
    files = {}
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        if path.suffix in WATCHED_SUFFIXES and path.is_file():
            try:
                files[str(path.relative_to(root))] = path.stat().st_mtime_ns
            except OSError:  # removed while we looked
                continue
    return files


def changes(old: dict[str, int], new: dict[str, int]) -> list[str]:
    """Files added, removed or modified between two snapshots."""
    return sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))


def saved_at(changed: Iterable[str], now: dict[str, int], *, after: float, before: float) -> float:
    """When the change was saved: the newest mtime of the changed files, kept between the last poll
    that saw no change (`after`) and the poll that saw it (`before`): an mtime set into the past or
    the future (touch -d, a copy keeping times) says nothing about when the file was saved."""
    newest = max((now[name] / 1e9 for name in changed if name in now), default=before)
    return min(max(newest, after), before)


def poll(root: Path, handle: Callable[[list[str], float], None], *, interval: float,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
         max_cycles: int | None = None) -> int:
    """handle([], now) at once, then handle(changed, saved) after each poll that finds files under
    root added, removed or modified (`saved`: saved_at). An edit saved while a round runs starts the
    next one. Returns the number of rounds (for tests: max_cycles bounds the polls)."""
    before, seen = snapshot(root), clock()
    handle([], seen)
    rounds, polls = 1, 0
    while max_cycles is None or polls < max_cycles:
        sleep(interval)
        polls += 1
        looked, now = clock(), snapshot(root)
        changed = changes(before, now)
        if changed:
            handle(changed, saved_at(changed, now, after=seen, before=looked))
            rounds += 1
            before = now
        seen = looked
    return rounds


def shown(names: list[str], limit: int = 3) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


# ---------------------------------------------------------------- each round in a new process

def watch(root: Path, command: list[str], *, interval: float = 1.0, log: Callable[[str], None],
          run: Callable[[list[str]], int] = lambda cmd: subprocess.run(cmd, check=False).returncode,
          sleep: Callable[[float], None] = time.sleep, max_cycles: int | None = None) -> int:
    """Run `command` now and after every change under root (each run a new process); returns the
    number of runs."""
    log(f"watching {root} (every {interval:g}s; Ctrl-C stops)")

    def handle(changed: list[str], saved: float) -> None:
        if changed:
            log(f"changed: {shown(changed)}: rebuilding and testing")
        code = run(command)
        log(f"{'passed' if code == 0 else f'exit {code}'}; waiting for a change under {root}")

    return poll(root, handle, interval=interval, sleep=sleep, max_cycles=max_cycles)


# ---------------------------------------------------------------- the warm loop

def rebuilt_variants(rebuilt: Iterable[str], built: list[Variant], *, test_all: bool = False) -> list[Variant]:
    """The variants to test after a build that ran the `rebuilt` targets (ninja_output's names: a
    TU's name for its object, "binding", "link"): those one of whose kernel objects was recompiled
    (a variant's own, or one of its kernel TUs': units.variant_name), and with a variant's own TU every variant
    that shares its small kernels (Variant.small_kernels_group: one of their TUs compiles them for all, so an edit
    to them recompiles that TU alone); all of them when the binding (it calls every kernel) or an object of no
    variant was, or test_all."""
    owners = {variant_name(target) for target in rebuilt}  # a kernel TU's object: its variant's
    names = {v.name for v in built}
    if test_all or any(owner not in names and owner != "link" for owner in owners):
        return list(built)
    groups = {v.small_kernels_group for v in built if v.name in rebuilt and v.small_kernels_header}
    return [v for v in built if v.name in owners or (v.small_kernels_header and v.small_kernels_group in groups)]


@dataclass
class Round:
    """One save -> verdict: what changed and was rebuilt, what was tested, how long each step took."""

    changed: list[str]
    saved: float                     # epoch seconds: when the change was saved (poll.saved_at)
    rebuilt: list[str] = field(default_factory=list)  # the targets ninja ran
    tested: list[str] = field(default_factory=list)   # the variants checked
    rebuilt_variants: list[str] = field(default_factory=list)  # the variants whose objects were rebuilt
    build_s: float = 0.0             # render + ninja + link
    load_s: float = 0.0              # importing the relinked extension
    test_s: float = 0.0
    checks: int = 0
    failed: int = 0
    result: str = ""                 # pass | FAIL | nothing checked | build failed | load failed | nothing rebuilt
    error: str = ""
    still_failing: list[str] = field(default_factory=list)  # failed in an earlier round, not tested now
    lost_context: bool = False
    finished: float = 0.0            # epoch seconds of the verdict

    @property
    def total_s(self) -> float:
        return self.finished - self.saved

    def line(self) -> str:
        """The verdict, one line."""
        kernels = [t for t in self.rebuilt if t not in NOT_KERNELS]
        what = ([f"{len(kernels)} TU{'' if len(kernels) == 1 else 's'}"] if kernels else []) + \
            [t for t in NOT_KERNELS if t in self.rebuilt]
        load = f" (load {self.load_s:.1f}s)" if self.load_s >= 0.05 else ""
        if self.result == "build failed":
            parts = [f"build failed in {self.build_s:.1f}s: {self.error}"]
        elif what:
            parts = [f"rebuilt {' + '.join(what)} in {self.build_s:.1f}s{load}"]
        else:
            parts = [f"nothing to rebuild ({self.build_s:.1f}s){load}"]
        if self.result == "load failed":
            parts.append(f"load failed: {self.error}")
        elif self.result == "nothing rebuilt":
            parts.append("no kernel changed: nothing to test")
        elif self.result == "nothing checked":
            parts.append(f"rebuilt variants not checked here (this GPU runs none of them): "
                         f"{shown(self.rebuilt_variants, 4)}")
        elif self.result in ("pass", "FAIL"):
            verdict = "pass" if self.result == "pass" else f"FAIL ({self.failed} failed)"
            parts.append(f"tested {self.checks} check{'' if self.checks == 1 else 's'} of {shown(self.tested, 4)} "
                         f"in {self.test_s:.1f}s: {verdict}")
        if self.still_failing:
            parts.append(f"still failing from an earlier round: {shown(self.still_failing)}")
        if self.changed:
            parts.append(f"save->verdict {self.total_s:.1f}s")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total_s": round(self.total_s, 3), "verdict": self.line()}


@dataclass
class WarmLoop:
    """The warm process's rounds. build() -> a BuildResult (its timings name the targets ninja ran;
    raises FlashbuildError on a compile error); objects(result) -> target name -> mtime (ns) of
    each object in the build; load(result) -> the extension (fresh after a relink);
    test(module, variants) -> checking.Row list.

    A round tests the variants whose objects changed since they were last tested: those ninja ran
    now, and those it recompiled in an earlier round whose build failed on another TU (never linked,
    so never tested). `failing` keeps the variants whose last check failed."""

    build: Callable[[], Any]
    load: Callable[[Any], Any]
    test: Callable[[Any, list[Variant]], list]
    objects: Callable[[Any], dict[str, int]] = lambda result: {}
    test_all: bool = False
    # which built variants to test after the targets ninja ran (an external tree's: tree_rebuilt_variants)
    select: Callable[..., list[Variant]] = rebuilt_variants
    clock: Callable[[], float] = time.time
    module: Any = None
    tested_objects: dict[str, int] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)

    def round(self, changed: list[str], saved: float) -> Round:
        out = Round(changed=list(changed), saved=saved)
        started = self.clock()
        try:
            result = self.build()
        except FlashbuildError as exc:
            out.build_s = self.clock() - started
            out.result, out.error, out.finished = "build failed", str(exc), self.clock()
            return out
        out.rebuilt = list(result.timings)
        objects = self.objects(result)
        pending = set(out.rebuilt) | {name for name, mtime in objects.items() if self.tested_objects.get(name) != mtime}
        loading = self.clock()
        out.build_s = loading - started
        if self.module is not None and not pending:
            out.result, out.finished = "nothing rebuilt", self.clock()
            return out
        try:
            self.module = self.load(result)
        except Exception as exc:  # noqa: BLE001 - an extension that does not load is this round's verdict
            out.load_s = self.clock() - loading
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            what = message if isinstance(exc, (ImportError, FlashbuildError)) else f"{type(exc).__name__}: {message}"
            out.result, out.error, out.finished = "load failed", what, self.clock()
            self.module = None  # the next round loads again
            return out
        testing = self.clock()
        out.load_s = testing - loading
        built = [Variant.from_name(name) for name in self.module.variants()]
        first = not self.tested_objects and not changed
        variants = self.select(pending, built, test_all=self.test_all or first)
        rows = self.test(self.module, variants) if variants else []
        self.tested_objects = objects
        out.test_s = self.clock() - testing
        out.tested = list(dict.fromkeys(row.variant for row in rows if row.status != "skip"))
        out.checks = sum(row.status != "skip" for row in rows)
        out.failed = sum(row.status == "FAIL" for row in rows)
        out.lost_context = any(checking.lost_context(row) for row in rows)
        names = {v.name for v in variants}
        self.failing = (self.failing - names) | {row.variant for row in rows if row.status == "FAIL"}
        out.still_failing = sorted(self.failing - names)
        out.rebuilt_variants = [v.name for v in variants]
        out.result = ("nothing rebuilt" if not variants else "FAIL" if out.failed else
                      "pass" if out.checks else "nothing checked")
        out.finished = self.clock()
        return out


def watch_warm(root: Path, loop: WarmLoop, *, interval: float, log: Callable[[str], None],
               echo: Callable[[str], None], record: Callable[[Round], None] = lambda r: None,
               restart: Callable[[], None] | None = None, sleep: Callable[[float], None] = time.sleep,
               max_cycles: int | None = None, checks_in_child: bool = False) -> int:
    """The warm loop: a first round (build, load, test every variant), then one round per change
    under root; each ends with its verdict line (echo, timestamped) and record(round). Returns the
    number of rounds."""
    how = ("each save rebuilds here and checks the new build in a fresh process" if checks_in_child else
           "one process; each save rebuilds, loads the new build and tests")
    log(f"watching {root} (every {interval:g}s; Ctrl-C stops): {how} "
        f"{'every variant' if loop.test_all else 'the variants it rebuilt'}")

    def handle(changed: list[str], saved: float) -> None:
        if changed:
            log(f"changed: {shown(changed)}")
        done = loop.round(changed, saved)
        stamp = time.strftime("%H:%M:%S", time.localtime(done.finished))
        echo(f"[{stamp}] {done.line()}")
        record(done)
        if done.lost_context and restart is not None:
            log("a check lost the CUDA context: this process cannot run kernels again; restarting the watch "
                "in a new process")
            restart()
        log(f"waiting for a change under {root}")

    return poll(root, handle, interval=interval, sleep=sleep, max_cycles=max_cycles)


def append_json(path: Path) -> Callable[[Round], None]:
    """record for watch_warm: one JSON object per round, appended to `path` (flushed at once, so a
    benchmark can read each verdict as it comes)."""
    def record(done: Round) -> None:
        with open(path, "a") as f:
            f.write(json.dumps(done.to_json()) + "\n")
    return record


# ---------------------------------------------------------------- wiring: our build, our checks

def build_objects(build_dir: Path) -> dict[str, int]:
    """target name (ninja_output's: a variant's name, "binding") -> mtime (ns) of each object of a build."""
    from ..pipeline.ninja_output import NinjaOutput

    out = {}
    for path in sorted((Path(build_dir) / "obj").glob("*.o")):
        try:
            out[NinjaOutput.target_name(f"obj/{path.name}")] = path.stat().st_mtime_ns
        except OSError:
            continue
    return out


def warm_loop(selection, options, gpu, *, shapes: str, seed: int = 0, test_all: bool = False,
              echo: Callable[[str], None]) -> WarmLoop:
    """A WarmLoop over the builder and `flashbuild test`'s checks for `selection` on `gpu`: of the
    variants to test, those this GPU runs (as `flashbuild test` picks them) are checked; each failed
    check's row is echoed."""
    from ..pipeline import builder
    from . import runtime

    plan = builder.make_plan(selection, options)  # what builder.build builds each round

    def load(result):
        if result.extension is None:
            raise FlashbuildError(f"{plan.key} was built with --compile-only, which links no extension to test; "
                                  f"drop --compile-only")
        return builder.import_build(plan)  # an undefined symbol: load()'s ExtensionImportError

    def test(module, variants):
        here, _ = runtime.runnable([Variant.from_name(name) for name in module.variants()], gpu)
        here = [v for v in variants if v in here]
        shape_sets = (checking.SHAPE_SETS[shapes], checking.FEATURE_SHAPE_SETS[shapes])
        width = max([30] + [len(v.name) for v in here])
        shape_width = checking.shape_width(here, *shape_sets)

        def on_row(row):
            if row.status == "FAIL":
                echo(checking.format_row(row, width, shape_width))

        return checking.run_checks(module, here, shape_sets[0], feature_shapes=shape_sets[1], seed=seed,
                                   device=gpu.device, on_row=on_row)

    return WarmLoop(build=lambda: builder.build(selection, options), load=load, test=test,
                    objects=lambda result: build_objects(result.build_dir), test_all=test_all)


# ---------------------------------------------------------------- an external tree's slice

# Why a tree's rounds check in a child process: a relinked module cannot replace the first in this one.
TREE_RELOAD = ("the tree's Python package imports its extension by name, once per process, and registers its torch "
               "ops then (flash-attn 3's _C the torch.ops.flash_attn_3 library, which torch refuses to register "
               "twice; flash-attn 2's interface its flash_attn:: custom ops over the flash_attn_2_cuda it imported)")


def tree_rebuilt_variants(manifest: dict) -> Callable[..., list[Variant]]:
    """WarmLoop.select for a tree's slice: the variants of the units whose objects ninja recompiled (a unit
    serves the variants of its direction, head dim and dtype, and of its causal value where it has one);
    every variant when another object (the API, the stubs, a support TU) was, or test_all."""
    units = {u["name"]: u for u in manifest["units"]}

    def select(rebuilt: Iterable[str], built: list[Variant], *, test_all: bool = False) -> list[Variant]:
        rebuilt = [t for t in rebuilt if t != "link"]
        if test_all or any(t not in units or units[t]["direction"] not in ("fwd", "bwd", "splitkv") for t in rebuilt):
            return list(built)
        out = []
        for v in built:
            for name in rebuilt:
                u = units[name]
                if (u["direction"], u["hdim"], u["dtype"]) == (v.direction, v.hdim, v.dtype) and \
                        u.get("causal") in (None, v.causal):
                    out.append(v)
                    break
        return out
    return select


@dataclass(frozen=True)
class TreeBuild:
    """A linked tree build as the watching process sees it: its variants (from its manifest, as its
    adapter lists them), never imported here."""

    manifest: dict

    def variants(self) -> list[str]:
        from . import adapters

        listed = adapters.fa3_slice_variants if self.manifest["profile"] == "flash-attn-3" else adapters.slice_variants
        return [v.name for v in listed(self.manifest)]


def _request(selection, options) -> dict:
    """parse_request's keywords that give this selection and build back in the child."""
    flags = options.flags
    return {**selection.as_kwargs(), "debug": flags.debug, "lineinfo": flags.lineinfo,
            "nvcc_flags": list(flags.nvcc_flags), "build_dir": str(options.build_dir) if options.build_dir else None,
            "jobs": options.jobs, "launcher": options.launcher}


class SpareChild:
    """The next round's check process, started ahead (`python -m flashbuild.debug.watch --serve`): it imports
    torch and flashbuild and opens the GPU while the user edits and the build compiles, then waits for a
    round's request on its stdin. Each round still checks in a process of its own (TREE_RELOAD); only the
    start-up is paid before the save. The watching process's end closes the stdin, and the spare exits."""

    def __init__(self, start: Callable[[], subprocess.Popen] | None = None):
        self._start = start or (lambda: subprocess.Popen(
            [sys.executable, "-m", "flashbuild.debug.watch", "--serve"], stdin=subprocess.PIPE, text=True))
        self._process: subprocess.Popen | None = None

    def warm(self) -> None:
        if self._process is None or self._process.poll() is not None:
            self._process = self._start()

    def run(self, command: list[str]) -> int:
        """Run a round (`command`'s last argument is the request file) in the spare; start the next one."""
        self.warm()
        process, self._process = self._process, None
        try:
            process.stdin.write(command[-1] + "\n")
            process.stdin.close()
        except (BrokenPipeError, OSError):  # the spare died while waiting (e.g. no GPU): a fresh one says why
            process.wait()
            code = subprocess.run(command, check=False).returncode
        else:
            code = process.wait()
        self.warm()
        return code

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            try:
                self._process.stdin.close()
                self._process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
        self._process = None


def tree_loop(selection, options, *, shapes: str, seed: int = 0, test_all: bool = False,
              echo: Callable[[str], None],
              run: Callable[[list[str]], int] | None = None) -> WarmLoop:
    """A WarmLoop for an external tree's slice: builder.build in this process; each round's checks in a
    child (`python -m flashbuild.debug.watch REQUEST.json`) that imports the relinked build once, checks the
    named variants, echoes its failed rows and writes its counts back (TREE_RELOAD says why a child). The
    child is started a round ahead (SpareChild), so a round pays for the tree's import and the checks only."""
    import atexit
    import json as json_module
    import tempfile

    from ..pipeline import builder

    plan = builder.make_plan(selection, options)
    if run is None:
        spare = SpareChild()
        spare.warm()
        atexit.register(spare.close)
        run = spare.run

    def load(result):
        if result.extension is None:
            raise FlashbuildError(f"{plan.key} was built with --compile-only, which links no extension to test; "
                                  f"drop --compile-only")
        return TreeBuild(json_module.loads(plan.manifest_path.read_text()))

    def test(build: TreeBuild, variants: list[Variant]):
        with tempfile.TemporaryDirectory(prefix="flashbuild-watch-") as tmp:
            request = Path(tmp) / "request.json"
            request.write_text(json_module.dumps({"request": _request(selection, options), "seed": seed,
                                                  "shapes": shapes, "variants": [v.name for v in variants],
                                                  "out": str(Path(tmp) / "rows.json")}))
            code = run([sys.executable, "-m", "flashbuild.debug.watch", str(request)])
            try:
                rows = json_module.loads((Path(tmp) / "rows.json").read_text())
            except (OSError, ValueError):
                rows = [{"variant": v.name, "status": "FAIL", "error": f"the check process exited {code}"}
                        for v in variants]
        return [checking_row(row) for row in rows]

    loop = WarmLoop(build=lambda: builder.build(selection, options), load=load, test=test,
                    objects=lambda result: build_objects(result.build_dir), test_all=test_all)
    loop.select = lambda rebuilt, built, test_all=False: tree_rebuilt_variants(
        json_module.loads(plan.manifest_path.read_text()))(rebuilt, built, test_all=test_all)
    return loop


@dataclass(frozen=True)
class _ChildRow:
    """What the parent needs of a child's check row (WarmLoop.round reads variant and status)."""

    variant: str
    status: str
    error: str = ""


def checking_row(row: dict) -> _ChildRow:
    return _ChildRow(row["variant"], row["status"], row.get("error", ""))


def child(request_path: str) -> int:
    """The check process of tree_loop: import the build, check the requested variants, write the rows."""
    import json as json_module

    from ..pipeline import builder
    from . import runtime

    job = json_module.loads(Path(request_path).read_text())
    selection, options = builder.parse_request(**job["request"])
    gpu = runtime.require_gpu("watch")
    module = runtime.open_tree_build(builder.make_plan(selection, options))
    wanted = set(job["variants"])
    variants = [Variant.from_name(n) for n in module.variants() if n in wanted]
    here, _ = runtime.runnable(variants, gpu)
    shape_sets = (checking.SHAPE_SETS[job["shapes"]], checking.FEATURE_SHAPE_SETS[job["shapes"]])
    width, shape_width = max([30] + [len(v.name) for v in here]), checking.shape_width(here, *shape_sets)

    def on_row(row):
        if row.status == "FAIL":
            print(checking.format_row(row, width, shape_width), flush=True)

    rows = checking.run_checks(module, here, shape_sets[0], feature_shapes=shape_sets[1], seed=job["seed"],
                               device=gpu.device, on_row=on_row)
    Path(job["out"]).write_text(json_module.dumps([{"variant": r.variant, "status": r.status} for r in rows]))
    return 0


def serve() -> int:
    """SpareChild's process: import what a round needs and open the GPU, then run the request whose path
    arrives on stdin (none: the watch ended, exit)."""
    import signal

    # Ctrl-C in the terminal reaches this process too: while it waits, the watching process ends it (its
    # stdin closes), so it ignores SIGINT until its round starts (no traceback under the watch's last line).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from ..pipeline import builder  # noqa: F401 (imported ahead: the round's start-up)
    from . import checking, runtime  # noqa: F401

    try:
        runtime.require_gpu("watch")
        import torch

        torch.empty(1, device="cuda")  # the CUDA context, ahead
    except FlashbuildError:
        pass  # the round's child() says it, in its own words
    line = sys.stdin.readline().strip()
    if not line:
        return 0
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the round: Ctrl-C stops it, as before
    return child(line)


if __name__ == "__main__":
    raise SystemExit(serve() if sys.argv[1:] == ["--serve"] else child(sys.argv[1]))
