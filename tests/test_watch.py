"""`flashbuild watch`: polling kernels/ for saved files; the warm loop (rebuild, load fresh, test
what was rebuilt) with its build, load and checks faked; the same loop on a real ninja build of
the synthetic kernels (real nvcc, no GPU), where touching a backward header must test the backward
variants alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from flashbuild.commands import options as cli_options
from flashbuild.pipeline import builder
from flashbuild.debug import checking, runtime, watch
from flashbuild.errors import BuildError
from flashbuild.selection.variants import Variant
from helpers import FAKE_BWD_DETAIL, make_root, requires_nvcc, run_cli


def test_snapshot_sees_sources_and_changes_name_them(tmp_path):
    (tmp_path / "ampere").mkdir()
    (tmp_path / "ampere" / "fwd.h").write_text("a")
    (tmp_path / "notes.txt").write_text("not a source")
    before = watch.snapshot(tmp_path)
    assert list(before) == ["ampere/fwd.h"]
    os.utime(tmp_path / "ampere" / "fwd.h", ns=(1, before["ampere/fwd.h"] + 10**9))
    (tmp_path / "new.cuh").write_text("b")
    assert watch.changes(before, watch.snapshot(tmp_path)) == ["ampere/fwd.h", "new.cuh"]
    assert watch.changes(before, before) == []


def test_runs_once_then_after_each_change(tmp_path):
    header = tmp_path / "fwd.h"
    header.write_text("v1")
    runs, logs = [], []
    edits = iter([None, "v2", None, None, "v3"])  # one edit (or none) before each poll

    def sleep(_):
        edit = next(edits)
        if edit:
            header.write_text(edit)
            stamp = header.stat().st_mtime_ns + 10**9 * (len(runs) + 1)
            os.utime(header, ns=(stamp, stamp))

    count = watch.watch(tmp_path, ["flashbuild", "test"], interval=0.01, log=logs.append,
                        run=lambda cmd: runs.append(cmd) or 0, sleep=sleep, max_cycles=5)
    assert count == 3 and runs == [["flashbuild", "test"]] * 3
    assert sum(m.startswith("changed: fwd.h") for m in logs) == 2


def test_the_save_time_is_the_newest_mtime_kept_between_the_polls():
    now = {"a.h": 105 * 10**9, "b.h": 103 * 10**9}
    assert watch.saved_at(["a.h", "b.h"], now, after=100.0, before=106.0) == 105.0
    assert watch.saved_at(["a.h"], now, after=106.0, before=107.0) == 106.0  # touch -d into the past
    assert watch.saved_at(["a.h"], now, after=90.0, before=95.0) == 95.0     # a time in the future
    assert watch.saved_at(["gone.h"], now, after=100.0, before=106.0) == 106.0  # removed: seen at the poll


# ---------------------------------------------------------------- which variants a build makes us test

V = Variant.from_name
BUILT = [V(n) for n in ("fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_causal_sm90", "bwd_hdim64_fp16_sm90",
                        "bwd_hdim64_fp16_causal_sm90")]


@pytest.mark.parametrize("rebuilt, expected", [
    ({"bwd_hdim64_fp16_sm90", "bwd_hdim64_fp16_causal_sm90", "link"}, BUILT[2:]),  # a backward header
    ({"fwd_hdim64_fp16_causal_sm90", "link"}, BUILT[1:2]),
    ({"binding", "link"}, BUILT),    # the binding calls every kernel
    ({"missing_stubs"}, BUILT),      # an object of no variant: test everything
    ({"link"}, []),                  # relinked, no kernel recompiled
    (set(), []),
    # a Hopper kernel header: only the kernel TUs recompiled
    ({"fwd_hdim64_fp16_causal_sm90_kernel", "bwd_hdim64_fp16_sm90_kernel_ordered", "link"}, [BUILT[1], BUILT[2]]),
    ({"fwd_hdim64_fp16_sm90_kernel", "fwd_hdim64_fp16_sm90", "link"}, BUILT[:1]),  # both: tested once
])
def test_the_variants_to_test_are_those_whose_objects_were_rebuilt(rebuilt, expected):
    assert watch.rebuilt_variants(rebuilt, BUILT) == expected
    assert watch.rebuilt_variants(rebuilt, BUILT, test_all=True) == BUILT


def test_a_kernel_tus_object_is_named_after_its_variant(tmp_path):
    """build_objects' and ninja_output's target names are TU names; a kernel TU's maps to its variant."""
    from flashbuild.pipeline.ninja_output import NinjaOutput
    from flashbuild.sources.units import variant_name

    (tmp_path / "obj").mkdir()
    for name in ("fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_kernel", "flash_api"):
        (tmp_path / "obj" / f"{name}.o").write_bytes(b"")
    objects = watch.build_objects(tmp_path)
    assert set(objects) == {"fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_kernel", "binding"}
    assert NinjaOutput.target_name("obj/fwd_hdim64_fp16_sm90_kernel.o") == "fwd_hdim64_fp16_sm90_kernel"
    assert variant_name("fwd_hdim64_fp16_sm90_kernel") == "fwd_hdim64_fp16_sm90"
    assert variant_name("bwd_hdim64_fp16_sm90_kernel_ordered") == "bwd_hdim64_fp16_sm90"
    assert variant_name("fwd_hdim64_fp16_sm90_local_softcap") == "fwd_hdim64_fp16_sm90_local_softcap"
    assert watch.rebuilt_variants({"fwd_hdim64_fp16_sm90_kernel"}, BUILT) == BUILT[:1]


def test_a_rebuilt_launch_tu_tests_every_variant_sharing_its_small_kernels():
    """The backward's dsum and dQ conversion compile in one launch TU of the head dim and dtype (the first): an edit to
    common/bwd_dsum.h recompiles that TU alone, and every backward variant of the group runs the new kernel. A
    rebuilt kernel TU concerns its own variant; the forward has no shared small kernels."""
    assert watch.rebuilt_variants({"bwd_hdim64_fp16_sm90", "link"}, BUILT) == BUILT[2:]
    assert watch.rebuilt_variants({"bwd_hdim64_fp16_sm90_kernel", "link"}, BUILT) == BUILT[2:3]
    assert watch.rebuilt_variants({"fwd_hdim64_fp16_sm90", "link"}, BUILT) == BUILT[:1]
    other = BUILT + [V("bwd_hdim128_fp16_sm90")]  # another head dim: another group
    assert watch.rebuilt_variants({"bwd_hdim128_fp16_sm90"}, other) == other[4:]


# ---------------------------------------------------------------- the warm loop, faked

@dataclass
class FakeResult:
    timings: dict
    objects: dict


@dataclass
class FakeModule:
    build: int
    names: list = field(default_factory=lambda: [v.name for v in BUILT])

    def variants(self):
        return self.names


class FakeBuild:
    """A build dir: objects with mtimes; each build() 'recompiles' what was touched (or fails)."""

    def __init__(self):
        self.mtimes = {v.name: 1 for v in BUILT} | {"binding": 1}
        self.dirty: set[str] = set()
        self.fail: set[str] = set()   # targets whose compile fails (the others still compile: ninja -k 0)
        self.builds = 0
        self.loads: list[int] = []
        self.tested: list[list[str]] = []
        self.failing_checks: set[str] = set()

    def build(self):
        compiled = self.dirty - self.fail
        for name in compiled:
            self.mtimes[name] += 1
        self.dirty = set(self.fail & self.dirty)
        if self.dirty:
            raise BuildError(f"build failed: 1 target failed: {sorted(self.dirty)[0]}: error")
        self.builds += 1
        return FakeResult({n: 1.0 for n in compiled} | ({"link": 0.5} if compiled else {}), dict(self.mtimes))

    def load(self, result):
        self.loads.append(self.builds)
        return FakeModule(self.builds)

    def test(self, module, variants):
        self.tested.append([v.name for v in variants])
        return [checking.Row(v.name, "b1 sq17", error="wrong" if v.name in self.failing_checks else None)
                for v in variants]

    def loop(self, **kwargs):
        return watch.WarmLoop(build=self.build, load=self.load, test=self.test, objects=lambda r: r.objects,
                              clock=iter(range(1000)).__next__, **kwargs)


def test_the_first_round_tests_everything_then_a_round_tests_what_was_rebuilt():
    fake = FakeBuild()
    loop = fake.loop()
    first = loop.round([], 0.0)
    assert first.result == "pass" and fake.tested == [[v.name for v in BUILT]] and first.checks == 4
    fake.dirty = {"bwd_hdim64_fp16_sm90", "bwd_hdim64_fp16_causal_sm90"}
    second = loop.round(["ampere/bwd_kernel.h"], -3.0)
    assert fake.tested[-1] == ["bwd_hdim64_fp16_sm90", "bwd_hdim64_fp16_causal_sm90"]
    assert set(second.rebuilt) == {"bwd_hdim64_fp16_sm90", "bwd_hdim64_fp16_causal_sm90", "link"}
    assert fake.loads == [1, 2]  # the relinked build was loaded
    line = second.line()
    assert line.startswith("rebuilt 2 TUs + link in ")
    assert "tested 2 checks of bwd_hdim64_fp16_sm90, bwd_hdim64_fp16_causal_sm90 in " in line
    assert ": pass; save->verdict " in line


def test_a_round_that_rebuilt_nothing_neither_loads_nor_tests():
    fake = FakeBuild()
    loop = fake.loop()
    loop.round([], 0.0)
    done = loop.round(["ampere/unused.h"], 0.0)
    assert done.result == "nothing rebuilt" and fake.loads == [1] and len(fake.tested) == 1
    assert done.line().startswith("nothing to rebuild (") and "nothing to test" in done.line()


def test_a_binding_edit_tests_every_variant_and_test_all_always_does():
    fake = FakeBuild()
    loop = fake.loop()
    loop.round([], 0.0)
    fake.dirty = {"binding"}
    loop.round(["binding/flash_api.cpp"], 0.0)
    assert fake.tested[-1] == [v.name for v in BUILT]
    loop = fake.loop(test_all=True)
    loop.round([], 0.0)
    fake.dirty = {"fwd_hdim64_fp16_sm90"}
    loop.round(["ampere/fwd_kernel.h"], 0.0)
    assert fake.tested[-1] == [v.name for v in BUILT]


def test_a_failed_build_is_the_verdict_and_its_rebuilt_objects_are_tested_once_it_builds():
    fake = FakeBuild()
    loop = fake.loop()
    loop.round([], 0.0)
    # an edit that breaks the causal forward only: the other forward TU still recompiles (ninja -k 0)
    fake.dirty, fake.fail = {"fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_causal_sm90"}, {"fwd_hdim64_fp16_causal_sm90"}
    broken = loop.round(["ampere/fwd_kernel.h"], 0.0)
    assert broken.result == "build failed" and broken.line().startswith("build failed in ")
    assert "fwd_hdim64_fp16_causal_sm90: error" in broken.line() and len(fake.tested) == 1
    fake.fail = set()  # fixed: ninja recompiles the causal TU only ...
    fixed = loop.round(["ampere/fwd_kernel.h"], 0.0)
    assert fixed.rebuilt == ["fwd_hdim64_fp16_causal_sm90", "link"]
    # ... and both forward variants are tested: the other one's new object was never linked or tested
    assert fake.tested[-1] == ["fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_causal_sm90"]


def test_failures_are_reported_and_remembered_until_the_variant_passes_again():
    fake = FakeBuild()
    loop = fake.loop()
    loop.round([], 0.0)
    fake.failing_checks = {"fwd_hdim64_fp16_sm90"}
    fake.dirty = {"fwd_hdim64_fp16_sm90"}
    failed = loop.round(["ampere/fwd_kernel.h"], 0.0)
    assert failed.result == "FAIL" and ": FAIL (1 failed)" in failed.line()
    fake.dirty = {"bwd_hdim64_fp16_sm90"}
    other = loop.round(["ampere/bwd_kernel.h"], 0.0)
    assert other.result == "pass" and "still failing from an earlier round: fwd_hdim64_fp16_sm90" in other.line()
    fake.failing_checks, fake.dirty = set(), {"fwd_hdim64_fp16_sm90"}
    assert "still failing" not in loop.round(["ampere/fwd_kernel.h"], 0.0).line()


def test_a_load_that_fails_is_the_verdict_and_the_next_round_loads_again():
    fake = FakeBuild()
    loads = iter([ImportError("refusing to import x.so: its extension x.so: it is writable by others"), None])

    def load(result):
        error = next(loads)
        if error:
            raise error
        return FakeModule(1)

    loop = watch.WarmLoop(build=fake.build, load=load, test=fake.test, objects=lambda r: r.objects)
    assert loop.round([], 0.0).line().endswith("load failed: refusing to import x.so: its extension x.so: it is "
                                               "writable by others")
    assert loop.round(["ampere/x.h"], 0.0).result == "pass"
    broken = watch.WarmLoop(build=fake.build, load=lambda result: {}["PyInit"], test=fake.test)
    assert broken.round([], 0.0).line().endswith("load failed: KeyError: 'PyInit'")  # a verdict, not a traceback


def test_the_warm_watch_prints_a_verdict_per_round_records_json_and_restarts_after_a_lost_context(tmp_path):
    (tmp_path / "fwd.h").write_text("v1")
    fake = FakeBuild()
    lost = {"on": False}

    def test(module, variants):
        rows = fake.test(module, variants)
        if lost["on"]:
            rows[0].error = "RuntimeError: CUDA error: an illegal memory access was encountered"
        return rows

    loop = watch.WarmLoop(build=fake.build, load=fake.load, test=test, objects=lambda r: r.objects)
    echoed, restarts = [], []
    edits = iter([None, "v2"])

    def sleep(_):
        if next(edits):
            (tmp_path / "fwd.h").write_text("v2")
            os.utime(tmp_path / "fwd.h", ns=(time.time_ns(), time.time_ns()))
            fake.dirty, lost["on"] = {"fwd_hdim64_fp16_sm90"}, True

    rounds = watch.watch_warm(tmp_path, loop, interval=0.01, log=lambda m: None, echo=echoed.append,
                              record=watch.append_json(tmp_path / "rounds.jsonl"), restart=lambda: restarts.append(1),
                              sleep=sleep, max_cycles=2)
    assert rounds == 2 and restarts == [1]
    assert all(line.startswith("[") and "] " in line for line in echoed)
    records = [json.loads(line) for line in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert [r["changed"] for r in records] == [[], ["fwd.h"]]
    assert records[1]["tested"] == ["fwd_hdim64_fp16_sm90"] and records[1]["result"] == "FAIL"
    assert 0 <= records[1]["total_s"] < 60 and records[1]["finished"] >= records[1]["saved"]
    assert records[1]["verdict"] in echoed[1]


# ---------------------------------------------------------------- the same loop over a real build

SELECTION = dict(hdim=64, dtype="fp16", arch="sm80", direction="fwd,bwd", causal="both", features=[],
                 compile_only=True)
FWD = ["fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_causal_sm80"]
BWD = ["bwd_hdim64_fp16_sm80", "bwd_hdim64_fp16_causal_sm80"]


@requires_nvcc
@pytest.mark.compile
def test_touching_a_backward_header_tests_the_backward_variants_alone(tmp_path, monkeypatch):
    """ninja (real nvcc, synthetic kernels) says which objects it recompiled; the loop maps them
    back to variants and tests those. The load is faked: the build is compile-only (no CUDA torch)."""
    root = make_root(tmp_path)
    monkeypatch.setenv("FLASHBUILD_ROOT", str(root))
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(tmp_path / "cache"))
    selection, options = builder.parse_request(**SELECTION)
    tested = []
    loop = watch.WarmLoop(
        build=lambda: builder.build(selection, options),
        load=lambda result: FakeModule(0, result.manifest["variants"]),
        test=lambda module, variants: tested.append([v.name for v in variants]) or
        [checking.Row(v.name, "-") for v in variants],
        objects=lambda result: watch.build_objects(result.build_dir))
    first = loop.round([], time.time())
    assert sorted(first.rebuilt) == sorted(FWD + BWD) and sorted(tested[0]) == sorted(FWD + BWD)
    time.sleep(0.05)
    os.utime(root / "kernels" / FAKE_BWD_DETAIL)
    done = loop.round([FAKE_BWD_DETAIL], time.time())
    assert sorted(done.rebuilt) == sorted(BWD) and sorted(tested[-1]) == sorted(BWD)
    assert done.line().startswith("rebuilt 2 TUs in ") and ": pass; save->verdict " in done.line()
    assert loop.round(["ampere/unused.h"], time.time()).result == "nothing rebuilt" and len(tested) == 2


# ---------------------------------------------------------------- the wiring: builder, loader, `test`'s checks

def test_the_wired_loop_checks_the_rebuilt_variants_this_gpu_runs_and_echoes_failed_rows(monkeypatch, tmp_path):
    """watch.warm_loop over builder.build / builder.import_extension (faked) and the real checks, on
    CPU tensors with the fake extension of test_checking (the fp32 reference, or one planted fault)."""
    pytest.importorskip("torch")
    from test_checking import BWD, FWD, FakeExt

    ext = FakeExt(names=[FWD.name, BWD.name, "fwd_hdim64_fp16_causal_sm80"])
    timings = {}
    monkeypatch.setattr(builder, "build", lambda selection, options: FakeBuildResult(dict(timings), tmp_path))
    monkeypatch.setattr(builder, "import_extension", lambda extension, module_name, fresh=True: ext)
    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm80,sm90", direction="fwd,bwd",
                                               causal="on", features=[])
    echoed = []
    loop = watch.warm_loop(selection, options, runtime.Gpu("Fake H200", 90, "2.x", "cpu"), shapes="quick",
                           echo=echoed.append)
    first = loop.round([], time.time())
    assert first.result == "pass" and first.tested == [FWD.name, BWD.name]  # sm80's kernel does not run on sm90
    assert first.checks == 2 * len(checking.SHAPES_QUICK) and echoed == []
    timings.update({FWD.name: 30.0, "link": 1.0})
    ext.fault = "wrong-row"  # the edit broke the forward
    done = loop.round(["hopper/fwd_mainloop.h"], time.time())
    assert done.tested == [FWD.name] and done.result == "FAIL" and done.failed == len(checking.SHAPES_QUICK)
    assert len(echoed) == len(checking.SHAPES_QUICK) and all(FWD.name in line and "FAIL" in line for line in echoed)
    assert f"tested 3 checks of {FWD.name} in " in done.line() and ": FAIL (3 failed)" in done.line()


def test_the_wired_loop_names_the_build_of_an_extension_that_links_but_does_not_import(monkeypatch, tmp_path):
    """An undefined symbol at import is load()'s ExtensionImportError in the verdict (the build, where
    the link line is), not the bare ImportError."""
    def undefined(extension, module_name, fresh=True):
        raise ImportError(f"{extension}: undefined symbol: _Z12run_mha_fwd_ILi90EN7cutlass6half_tELi64EEvR6Paramsv")

    monkeypatch.setattr(builder, "build", lambda selection, options: FakeBuildResult({}, tmp_path))
    monkeypatch.setattr(builder, "import_extension", undefined)
    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", direction="fwd", features=[])
    loop = watch.warm_loop(selection, options, runtime.Gpu("Fake H200", 90, "2.x", "cpu"), shapes="quick",
                           echo=lambda line: None)
    done = loop.round([], time.time())
    key = builder.make_plan(selection, options).key
    assert done.result == "load failed" and "linked but does not import" in done.error
    assert key in done.error and "-v` shows the link line" in done.error and "run_mha_fwd_" in done.error


@dataclass
class FakeBuildResult:
    timings: dict
    build_dir: object
    extension: str = "ext.so"
    module_name: str = "_flashbuild_fake"


# ---------------------------------------------------------------- the command

def test_watch_runs_the_warm_loop_on_the_selection(monkeypatch, cache, tmp_path):
    seen = {}
    gpu = runtime.Gpu("NVIDIA H200", 90, "2.9.0")
    monkeypatch.setattr(runtime, "require_gpu", lambda command: gpu)

    def fake_watch_warm(root, loop, interval, log, echo, record, restart):
        seen.update(root=root, loop=loop, interval=interval, record=record)
        return 1

    monkeypatch.setattr(watch, "watch_warm", fake_watch_warm)
    result = run_cli("watch", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd,bwd",
                     "--interval", "0.25", "--json", str(tmp_path / "rounds.jsonl"))
    assert result.exit_code == 0, result.output
    assert seen["root"].name == "kernels" and seen["interval"] == 0.25
    assert isinstance(seen["loop"], watch.WarmLoop) and not seen["loop"].test_all
    result = run_cli("watch", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--test-all")
    assert result.exit_code == 0 and seen["loop"].test_all


def test_watch_without_a_gpu_says_so(monkeypatch, cache, no_gpu):
    monkeypatch.setattr(runtime, "require_gpu", lambda command: (_ for _ in ()).throw(
        runtime.NoGpuError(f"flashbuild {command} runs kernels, so it needs a GPU")))
    result = run_cli("watch", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90")
    assert result.exit_code == 2 and "flashbuild watch runs kernels" in result.output
    assert "Traceback" not in result.output


def test_fresh_process_reruns_flashbuild_test_quick_on_the_selection(monkeypatch, cache):
    seen = {}

    def fake_watch(root, command, interval, log):
        seen.update(root=root, command=command, interval=interval)
        return 0

    monkeypatch.setattr(watch, "watch", fake_watch)
    monkeypatch.setattr(runtime, "require_gpu", lambda command: None)
    result = run_cli("watch", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd,bwd",
                     "--interval", "0.5", "--fresh-process")
    assert result.exit_code == 0, result.output
    assert seen["command"][:4] == [sys.executable, "-m", "flashbuild", "test"]
    assert seen["command"][4:] == ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd,bwd",
                                   "--causal", "both", "--shapes", "quick", "--seed", "0"]
    assert seen["root"].name == "kernels" and seen["interval"] == 0.5
    assert cli_options.build_args  # the same selection arguments a child test gets


def test_json_needs_the_warm_loop(cache, tmp_path):
    result = run_cli("watch", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--fresh-process",
                     "--json", str(tmp_path / "rounds.jsonl"))
    assert result.exit_code == 2 and "--json records the rounds of the warm loop" in result.output


def test_a_round_whose_rebuilt_variants_this_gpu_runs_none_of_is_not_a_pass():
    """Every check skipped (say, kernels built for another arch): the round says nothing was checked,
    where it printed 'pass' before."""
    fake = FakeBuild()
    fake.test = lambda module, variants: [checking.Row(v.name, "b1 sq17", skipped="built for sm80") for v in variants]
    first = fake.loop().round([], 0.0)
    assert first.result == "nothing checked" and first.checks == 0
    assert "not checked here" in first.line() and "pass" not in first.line()


def test_a_spare_check_process_runs_the_next_round_and_another_is_started_for_the_one_after(tmp_path):
    """An external tree's rounds each check in a process of their own, started a round ahead."""
    from flashbuild.debug.watch import SpareChild

    log = tmp_path / "rounds.txt"
    script = ("import sys, pathlib; line = sys.stdin.readline().strip(); "
              f"pathlib.Path({str(log)!r}).open('a').write(line + '\\n'); sys.exit(3 if line else 0)")
    started = []

    def start():
        started.append(subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, text=True))
        return started[-1]

    spare = SpareChild(start)
    spare.warm()
    assert len(started) == 1
    assert spare.run(["python", "-m", "flashbuild.debug.watch", "/req/1.json"]) == 3
    assert len(started) == 2 and started[0].returncode == 3 and started[1].poll() is None  # the next, waiting
    assert spare.run(["python", "-m", "flashbuild.debug.watch", "/req/2.json"]) == 3
    spare.close()  # the watch ends: the waiting spare reads no request and exits
    assert all(p.poll() is not None for p in started) and started[-1].returncode == 0
    assert log.read_text().split() == ["/req/1.json", "/req/2.json"]
