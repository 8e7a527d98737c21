"""Fuzz every file flashbuild reads (issue 48): profiles, presets and CI matrices (TOML), --costs, cache
manifests, shard manifests and bench result files. Each example starts from a good file, edits it
(values of every type, keys dropped or added, deep nesting, huge numbers) or replaces it by odd bytes,
and holds the property: the parser returns a checked value or raises the error flashbuild prints as one
line naming the file; never another exception, never a hang (each example is time-boxed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import given, settings, strategies as st

from fuzzing import (JSON, TOML_VALUES, assert_cli_property, examples, file_content, mutated, sandbox, timebox, toml_dump)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PROFILE = tomllib.loads((REPO / "configs" / "profiles" / "flashbuild.toml").read_text())


def expect(call, error: type, path: Path, seconds: float = 20):
    """call() under the time box: its value, or None when it raised `error` naming `path`."""
    with timebox(seconds, f"reading {path.name}"):
        try:
            return call()
        except error as exc:
            message = str(exc)
            assert str(path) in message or path.name in message, f"the error does not name {path}: {message[:300]}"
            assert "\n" not in message.strip(), f"not one line: {message[:300]}"
            return None


# ---------------------------------------------------------------- profiles

PLAIN = __import__("re").compile(r"[A-Za-z0-9_.+-]+")


@settings(max_examples=examples(60))
@given(mutated(PROFILE, TOML_VALUES))
def test_a_profile_is_read_checked_or_refused(data):
    from flashbuild.errors import SelectionError
    from flashbuild.sources import profile as profiles, profile_checks

    with sandbox() as box:
        path = box.cwd / "fuzzed.toml"
        path.write_text(toml_dump(data), errors="surrogatepass")
        found = expect(lambda: profiles.read_profile(path), SelectionError, path)
        if found is None:
            return
        # a profile that reads is safe where its values go: TU names are plain file names, flags reach no shell
        for direction, inst in found.instantiations.items():
            fields = dict(direction=direction, hdim=64, dtype="fp16", causal="_causal", arch="sm80", features="_local")
            assert PLAIN.fullmatch(inst.name.format(**fields)), inst.name
        for flag in (*found.nvcc_flags, *found.defines, *found.cxx_flags):
            assert profile_checks.flag_problem(flag) is None or flag.startswith("-Xcompiler"), flag


FA2_PROFILE = tomllib.loads((REPO / "configs" / "profiles" / "flash-attn-2.toml").read_text())
TRAITS = __import__("re").compile(r"[A-Za-z_][A-Za-z0-9_]*<[A-Za-z0-9_{}, ]+>")


@settings(max_examples=examples(40))
@given(mutated(FA2_PROFILE["switches"]["device"], TOML_VALUES))
def test_a_profiles_device_kernels_are_read_checked_or_refused(devices):
    """[[switches.device]] (issue 43): its traits and launcher are written into a generated C++ header."""
    import copy

    from flashbuild.errors import SelectionError
    from flashbuild.sources import profile as profiles

    data = copy.deepcopy(FA2_PROFILE)
    data["switches"]["device"] = devices
    with sandbox() as box:
        path = box.cwd / "fuzzed.toml"
        path.write_text(toml_dump(data), errors="surrogatepass")
        found = expect(lambda: profiles.read_profile(path), SelectionError, path)
        if found is None:
            return
        for kernel in found.switches.devices:  # what reaches the header: identifiers, digits, commas, spaces
            assert TRAITS.fullmatch(kernel.traits) and kernel.launcher.isidentifier(), kernel
            assert all(isinstance(d, str) and len(d) <= 4 for d in kernel.devices), kernel


@settings(max_examples=examples(8))
@given(mutated(PROFILE, TOML_VALUES, edits=2))
def test_a_fuzzed_profile_on_the_command_line(data):
    with sandbox() as box:
        (box.cwd / "fuzzed.toml").write_text(toml_dump(data), errors="surrogatepass")
        out = box.cli(["--source", str(REPO), "--profile", "fuzzed.toml", "--hdim", "64", "--dtype", "fp16", "--arch",
                       "sm80", "--direction", "fwd", "--causal", "off", "--features", "none", "--dry-run"])
        assert_cli_property(box, out, ("fuzzed.toml", "--profile", "--source", "--hdim", "--dtype", "--arch", "--direction",
                             "--features"))


# ---------------------------------------------------------------- presets and matrices

SELECTION_FLAGS = ("--hdim", "--dtype", "--arch", "--direction", "--causal", "--features")
PRESET = {"description": "a preset", "selection": {"hdim": [64], "dtype": ["fp16"], "arch": ["sm80"],
                                                   "direction": ["fwd"], "causal": "off", "features": []}}
MATRIX = {"description": "a matrix", "matrix": {"hdim": [64, 128], "dtype": ["fp16"], "arch": ["sm80"],
                                                "direction": ["fwd"], "causal": ["off"], "features": ["local,softcap"],
                                                "group_by": ["arch"], "shards": 2}}


@settings(max_examples=examples(25))
@given(mutated(PRESET, TOML_VALUES) | st.binary(max_size=40))
def test_a_preset_is_read_or_refused(data):
    with sandbox() as box:
        path = box.cwd / "p.toml"
        path.write_bytes(data if isinstance(data, bytes) else toml_dump(data).encode("utf-8", "surrogatepass"))
        # a preset that leaves a key out takes the flag's default (--arch native: this machine's GPU)
        assert_cli_property(box, box.cli(["--config", "p.toml", "--dry-run"]), ("p.toml", *SELECTION_FLAGS))


@settings(max_examples=examples(25))
@given(mutated(MATRIX, TOML_VALUES) | st.binary(max_size=40))
def test_a_matrix_is_read_or_refused(data):
    with sandbox() as box:
        path = box.cwd / "m.toml"
        path.write_bytes(data if isinstance(data, bytes) else toml_dump(data).encode("utf-8", "surrogatepass"))
        assert_cli_property(box, box.cli(["matrix", "m.toml", "--format", "github"]), ("m.toml",))


# ---------------------------------------------------------------- --costs

COSTS = {"fwd_hdim64_fp16_sm80": 12.5, "bwd_hdim64_fp16_sm80": 30}
NINJA_LOG = "# ninja log v5\n0\t12000\t0\tobj/fwd_hdim64_fp16_sm80.o\t1\n5\t900\t0\tobj/bwd_hdim64_fp16_sm80.o\t2\n"


@settings(max_examples=examples(60))
@given(file_content(COSTS) | st.text(max_size=200).map(lambda t: (NINJA_LOG + t).encode("utf-8", "surrogatepass")))
def test_costs_are_read_or_refused(content):
    import math

    from flashbuild.ci import shard
    from flashbuild.errors import SelectionError

    with sandbox() as box:
        path = box.cwd / "costs.json"
        path.write_bytes(content)
        found = expect(lambda: shard.read_costs(path), SelectionError, path)
        if found is not None:
            assert all(isinstance(k, str) and math.isfinite(v) and v >= 0 for k, v in found.items())


# ---------------------------------------------------------------- cache manifests

CACHE_MANIFEST = {"flashbuild": "0.1.0", "key": "KEY", "module_name": "_flashbuild_x", "variants": ["fwd_hdim64_fp16_sm80"],
                  "extension": "_flashbuild_x.so", "selection": {"hdim": [64]}}


@settings(max_examples=examples(40))
@given(file_content(CACHE_MANIFEST), st.booleans())
def test_cache_entries_are_listed_and_removed_whatever_their_manifest(content, marker):
    from flashbuild.pipeline import cache

    with sandbox() as box:
        root = box.root / "cache"
        entry = root / "sm80-fp16-h64-fwd-c0-fnone-deadbeef"
        entry.mkdir(parents=True, mode=0o700)
        root.chmod(0o700)
        (entry / "manifest.json").write_bytes(content)
        (entry / "obj").mkdir()
        (entry / "obj" / "a.o").write_bytes(b"x")
        if marker:
            (entry / cache.MARKER).write_text(cache.MARKER_TEXT)
        foreign = root / "not-ours"
        (foreign / "obj").mkdir(parents=True)
        (foreign / "manifest.json").write_bytes(content)
        with timebox(20, "cache.scan"):
            builds, skipped = cache.scan(root)
        assert "not-ours" not in [b.key for b in builds] or json.loads(content).get("key") == "not-ours"
        listed = [b for b in builds if b.path == entry]
        assert bool(listed) == (marker or _names_key(content, entry.name))
        for build in listed:
            with timebox(20, "cache.remove_build"):
                cache.remove_build(build, root)
            assert not entry.exists()
        assert (foreign / "manifest.json").exists()


def _names_key(content: bytes, key: str) -> bool:
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("key") == key


# ---------------------------------------------------------------- shard manifests

_ARTIFACT: dict = {}


def artifact_manifest() -> dict:
    """A real shard manifest (one shard of one TU, compiled by the fake nvcc), made once."""
    if not _ARTIFACT:
        with sandbox() as box:
            out = box.cli(["--hdim", "64", "--dtype", "fp16", "--arch", "sm80", "--direction", "fwd", "--causal", "off",
                           "--no-local", "--no-softcap", "--compile-only", "--shard", "1/1", "--artifact-dir", "art"])
            assert out.code == 0, out.stderr
            _ARTIFACT.update(json.loads((box.cwd / "art" / "manifest.json").read_text()))
    return _ARTIFACT


@settings(max_examples=examples(60))
@given(st.data())
def test_shard_manifests_are_checked_or_refused(data):
    from flashbuild.ci import link
    from flashbuild.errors import BuildError

    content = data.draw(file_content(artifact_manifest()))
    with sandbox() as box:
        art = box.cwd / "art"
        (art / "obj").mkdir(parents=True)
        (art / "obj" / "fwd_hdim64_fp16_sm80.o").write_bytes(b"object")
        (art / "manifest.json").write_bytes(content)
        found = expect(lambda: link.read(art), BuildError, art)
        if found is None:
            return
        with timebox(20, "link.check_fit"):
            try:
                link.check_fit([found])
            except BuildError as exc:
                assert "\n" not in str(exc).strip()
        names = [*found.manifest["units"], *found.manifest["extra_objects"], *found.manifest["objects"]]
        assert all(link.TU_NAME.fullmatch(n) for n in names)


# ---------------------------------------------------------------- bench result files

ROW = {"variant": "fwd_hdim64_fp16_sm80", "direction": "fwd", "hdim": 64, "dtype": "fp16", "causal": False,
       "seqlen": 1024, "batch": 16, "nheads": 32, "backend": "flashbuild", "ms": 1.5, "tflops": 91.6, "reps": 10,
       "note": "", "window_left": -1, "window_right": -1, "softcap": 0.0}
RESULTS = {"format": "flashbuild-bench", "version": 1, "command": "flashbuild bench", "device": "H200",
           "timing": "alone, 3 windows of 1 s", "results": [ROW, {**ROW, "backend": "sdpa-flash", "ms": 2.0}]}


@settings(max_examples=examples(60))
@given(file_content(RESULTS))
def test_bench_results_are_read_or_refused(content):
    from flashbuild.debug import bench
    from flashbuild.errors import ResultsFormatError

    with sandbox() as box:
        path = box.cwd / "r.json"
        path.write_bytes(content)
        found = expect(lambda: bench.load_results(path, "--results"), ResultsFormatError, path)
        if found is None:
            return
        info, results = found
        with timebox(20, "bench table"):
            assert "\x1b" not in bench.table(results)
            bench.results_csv(results)
            bench.compare(results, results)
            timing = bench.timing_of(info)  # --compare prints it
            assert timing.isprintable() and len(timing) <= 80, timing
