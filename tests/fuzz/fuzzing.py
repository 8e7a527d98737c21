"""Hypothesis settings of the fuzz suite (issue 48): every parser and every file flashbuild reads,
against the property "a clear error naming the input, or a checked success; never a traceback, never
a write outside the build dir, never a hang".

    python3 -m pytest tests/fuzz                          # profile "ci": bounded, < 3 min on 2 cores
    HYPOTHESIS_PROFILE=long python3 -m pytest tests/fuzz  # 40x the examples, with a local example database

The "ci" profile is derandomized (the same examples on every run, no database written); "long" keeps
the examples that failed in .hypothesis/ (git-ignored), so a rerun tries them first. Each example
runs under a time box (`timebox`): one that takes longer is a hang, a failure like any other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess

from hypothesis import HealthCheck, settings

COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                       HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=20, derandomize=True, database=None, **COMMON)
settings.register_profile("long", max_examples=800, **COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Examples per test are scaled by this (tests that run a whole CLI command use fewer).
SCALE = settings().max_examples / 20


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


class Hang(Exception):
    """An example ran past its time box."""


@contextlib.contextmanager
def timebox(seconds: float, what: str):
    """Raise Hang when the block runs longer than `seconds` (SIGALRM: the main thread only)."""
    def alarm(_signum, _frame):
        raise Hang(f"{what}: still running after {seconds} s (a hang)")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- kernel settings read from the environment
# A kernel header's setting parser (host code alone, e.g. kernels/hopper/fwd_pairs.h) compiled with the host
# compiler into a program that prints what it parsed; run once per example with one variable set.


def host_program(where, source: str):
    """`source` (a C++ main including kernels/ headers) compiled into `where`/p with the host compiler, or the
    test skipped when there is none."""
    import pytest

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("needs a host C++ compiler (g++)")
    kernels = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels")
    (where / "p.cpp").write_text(source)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{kernels}", str(where / "p.cpp"), "-o", str(where / "p")],
                   check=True, capture_output=True, text=True)
    return where / "p"


def program_fixture(stem: str, source: str):
    """A module-scoped fixture: `source` compiled once by host_program into a temporary dir named `stem`."""
    import pytest

    @pytest.fixture(scope="module")
    def parser(tmp_path_factory):
        return host_program(tmp_path_factory.mktemp(stem), source)

    return parser


def run_with_env(binary, name: str, value) -> str:
    """What `binary` prints with the variable `name` set to `value` (None: unset); it must exit 0 within 10 s."""
    env = {k: v for k, v in os.environ.items() if k != name}
    if value is not None:
        env[name] = value
    with timebox(10, f"{name}={value!r}"):
        done = subprocess.run([str(binary)], env=env, capture_output=True, timeout=10)
    assert done.returncode == 0, (value, done.returncode, done.stderr[-2000:])
    return done.stdout.decode("utf-8", "replace").strip()


# ---------------------------------------------------------------- what the examples are made of

import copy  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers import make_fake_cuda  # noqa: E402

MARK = "@MARK@"  # replaced by a file in the example's dir: an injected command would create it
HOSTILE = ["", " ", ",", ",,", "none", "none,none", "all", "both", "-1", "0", "1e400", "nan", "inf", "-inf", "9" * 5000,
           "٦٤", "²", "../../outside", "../../outside/x.toml", "/dev/zero", "/dev/null", "/", "~", ".", "..",
           f"$(touch {MARK})", f"`touch {MARK}`", f"x;touch {MARK}", f"-DX=$(touch {MARK})", "a\nb", "a\rb",
           "\udcff", "x" * 300, "sm90,sm90", "64 64", "\t", "--help", "-x", "\x1b[31mred", "a|b", "a#b", "a:b",
           "'", '"', "\\", "%s", "{hdim}", "{0}", "~0", "~no-such-user/x"]
# argv cannot hold a NUL byte: command-line strategies leave it out (files and environment values keep it)
NO_NUL = st.text(max_size=24).filter(lambda s: "\0" not in s)


def values(*valid: str) -> st.SearchStrategy[str]:
    """Text for one option: hostile strings, random text, numbers, and lists of valid words."""
    words = list(valid) or ["x"]
    return st.one_of(st.sampled_from(HOSTILE), NO_NUL, st.integers(-10**25, 10**25).map(str),
                     st.lists(st.sampled_from(words + ["none", "x"]), min_size=1, max_size=4).map(",".join),
                     st.sampled_from(words))


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-10**400, 10**400),
                    st.floats(), st.text(max_size=12), st.sampled_from(HOSTILE))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=12)
TOML_SCALARS = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False),
                         st.text(max_size=12), st.sampled_from(HOSTILE))
TOML_VALUES = st.recursive(TOML_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
                                                                                 inner, max_size=3)),
                           max_leaves=10)


DEEP = ("@DEEP50@", "@DEEP5000@")  # a value nested 50 or 5000 lists deep, once dumped


def undeep(text: str) -> str:
    """The dumped text with each DEEP marker (as a JSON or TOML string) replaced by its nesting."""
    for marker, depth in zip(DEEP, (50, 5000)):
        text = text.replace(f'"{marker}"', "[" * depth + "1" + "]" * depth)
    return text


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every (key path) inside nested dicts and lists."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for key, value in items:
        out.append(prefix + (key,))
        out += _paths(value, prefix + (key,))
    return out


@st.composite
def mutated(draw, base: Any, values: st.SearchStrategy = JSON, edits: int = 3) -> Any:
    """`base` (a JSON-like value) with 1..edits edits: a value replaced, a key dropped, a key added, a
    value nested very deep or its digits made huge."""
    obj = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, edits))):
        paths = _paths(obj)
        if not paths:
            return draw(values)
        path = draw(st.sampled_from(paths))
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = draw(st.sampled_from(["replace", "replace", "drop", "add", "deep"]))
        if op == "replace":
            parent[key] = draw(values)
        elif op == "drop":
            del parent[key]
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(values)
        elif op == "deep":  # a marker the dumpers turn into nested brackets (no Python recursion here)
            parent[key] = DEEP[draw(st.sampled_from([0, 1]))]
    return obj


def file_content(base: Any, dump=json.dumps, values: st.SearchStrategy = JSON) -> st.SearchStrategy[bytes]:
    """A file's bytes: `base` mutated and dumped, or raw bytes, deep nesting, huge numbers, empty."""
    def dumped(value: Any) -> bytes:
        try:
            return undeep(dump(value)).encode("utf-8", "surrogatepass")
        except (RecursionError, TypeError, ValueError):
            return b"[" * 100_000
    return st.one_of(mutated(base, values).map(dumped), mutated(base, values).map(dumped),
                     st.binary(max_size=64), st.sampled_from([b"", b"{", b"[" * 100_000 + b"]" * 100_000,
                                                              b"9" * 5000, b'{"a": ' + b"9" * 5000 + b"}",
                                                              b"\xff\xfe", b"\0"]))


def toml_dump(data: dict, prefix: str = "") -> str:
    """TOML for the strategies' tables (the standard library reads TOML but does not write it)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return repr(v) if v == v and v not in (float("inf"), float("-inf")) else ("nan" if v != v else
                                                                                     ("inf" if v > 0 else "-inf"))
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False).replace("\\ud", "\\uD")
        if isinstance(v, list):
            return "[" + ", ".join(value(i) for i in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(str(k))} = {value(i)}" for k, i in v.items()) + "}"
        if v is None:
            return '""'
        raise TypeError(v)
    if not isinstance(data, dict):
        return f"value = {undeep(value(data))}\n"
    lines = [f"{json.dumps(str(k))} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for k, v in data.items():
        if isinstance(v, dict):
            lines += [f"[{prefix}{json.dumps(str(k))}]", toml_dump(v, f"{prefix}{json.dumps(str(k))}.")]
    return undeep("\n".join(lines) + "\n")


# ---------------------------------------------------------------- running flashbuild in an example

@dataclass
class Outcome:
    code: int | None
    stdout: str
    stderr: str
    crash: str  # a traceback or the guard's bug line: never allowed


BUG = "a flashbuild bug"


class Sandbox:
    """A fresh directory for one example: the cache, a fake CUDA, a working dir two levels down (so a
    `../../x` lands inside the sandbox, where the check sees it), and the files the example writes."""

    def __init__(self, root: Path):
        self.root = root
        self.cwd = root / "w1" / "w2" / "cwd"
        self.cwd.mkdir(parents=True)
        make_fake_cuda(root)
        self.env = {"FLASHBUILD_CACHE_DIR": str(root / "cache"), "CUDA_HOME": str(root / "fake-cuda"),
                    "FAKE_NVCC_LOG": None, "XDG_CACHE_HOME": str(root / "xdg"), "FLASHBUILD_ROOT": None,
                    "CUDA_PATH": None, "CXX": None, "FLASHBUILD_LAUNCHER": None}
        self.before = self.files()

    def text(self, value: str) -> str:
        return value.replace(MARK, str(self.root / "pwned"))

    def files(self) -> set[str]:
        found = set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                found.add(os.path.relpath(os.path.join(dirpath, name), self.root))
        return found

    def cli(self, args: list[str], seconds: float = 60) -> Outcome:
        """flashbuild ARGS (click's runner, in this process), under the time box."""
        from click.testing import CliRunner

        from flashbuild.cli import cli
        self.before = self.files()  # what the example wrote itself is not the command's
        with self.environment(), timebox(seconds, f"flashbuild {' '.join(map(repr, args))[:200]}"):
            result = CliRunner().invoke(cli, [self.text(a) for a in args], catch_exceptions=True)
        crash = ""
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            crash = "".join(traceback.format_exception(*result.exc_info))
        if BUG in result.stderr or "Traceback (most recent call last)" in result.output:
            crash = result.stderr[-2000:]
        return Outcome(result.exit_code, result.stdout, result.stderr, crash)

    @contextlib.contextmanager
    def environment(self):
        saved, old = dict(os.environ), os.getcwd()
        for key, value in self.env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        os.chdir(self.cwd)
        try:
            yield
        finally:
            os.chdir(old)
            os.environ.clear()
            os.environ.update(saved)

    def written_outside(self, *allowed: str) -> list[str]:
        """Paths created in the sandbox outside the cache and `allowed` (relative to the sandbox)."""
        roots = ("cache", "xdg", *allowed)
        new = self.files() - self.before
        return sorted(p for p in new if not any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots))


def assert_cli_property(box: Sandbox, out: Outcome, names: tuple[str, ...], *allowed: str) -> None:
    """The property for one command line: exit 0, or exit 1/2 with one `flashbuild: error:` line that
    names one of `names` (the option or its value); never a traceback; no injected command ran; nothing
    written outside the cache and `allowed`."""
    assert not out.crash, out.crash
    assert not (box.root / "pwned").exists(), "an injected command ran"
    outside = box.written_outside(*allowed)
    assert not outside, f"written outside the build dir: {outside[:5]}"
    assert out.code in (0, 1, 2), (out.code, out.stderr[-500:])
    if out.code:
        lines = [line for line in out.stderr.splitlines() if line.startswith("flashbuild: error:")]
        assert len(lines) == 1, out.stderr[-1000:]
        shown = [box.text(n) for n in names if n]
        assert any(n in lines[0] or ascii(n)[1:-1][:40] in lines[0] or n[:40] in lines[0] for n in shown), \
            f"the error names none of {[n[:40] for n in shown]}: {lines[0][:300]}"


def sandbox() -> contextlib.AbstractContextManager[Sandbox]:
    import tempfile

    @contextlib.contextmanager
    def made():
        with tempfile.TemporaryDirectory(prefix="flashbuild-fuzz-") as tmp:
            yield Sandbox(Path(tmp))
            for dirpath, dirnames, _ in os.walk(tmp):  # a read-only dir an example made must not stop the cleanup
                for name in dirnames:
                    full = os.path.join(dirpath, name)
                    if not os.path.islink(full):
                        os.chmod(full, 0o700)
    return made()
