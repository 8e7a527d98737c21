"""Hostile and odd input (issue 24): bad values for the CLI, the Python API, config files, environment
variables, the cache and bench result files. Each case is data (a Case), so docs/hostile_inputs.py runs
the same list and writes the table docs/hostile-inputs.md.

A case expects `error` (exit 1 or 2; one `flashbuild: error:` line naming the input; from the API, a
FlashbuildError with a one-line message) or `ok` (rightly accepted: exit 0). Either way no traceback,
and its `check` (a marker file an injection would create, a symlink target that must survive, a flag
nvcc must receive as one argument) must hold. CPU only and fast: nothing runs the real nvcc. A build
runs a fake one (tests/helpers.py FAKE_NVCC, through CUDA_HOME), a dry run none; the cache is in tmp.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import REPO, make_fake_cuda  # noqa: E402

SURFACES = ("cli", "api", "config", "env", "cache", "results", "profile", "shard", "plugin")
TMP = "@TMP@"            # replaced by the case's temporary directory in args, env values and API keywords
MARKER = f"{TMP}/pwned"  # what an injected ninja rule or shell command would create
OUTCOMES = ("clear error", "rightly accepted", "dangerous", "traceback", "wrong or silent", "unclear error")
BUG_LINE = "flashbuild: internal error: a flashbuild bug"  # cli.report_bug: an exception nothing caught
GOOD = ("clear error", "rightly accepted")


@dataclass(frozen=True)
class Case:
    id: str
    surface: str                     # cli, api, config, env, cache, results
    args: tuple[str, ...] = ()       # flashbuild's arguments (every surface but api)
    call: Callable[[Path], Any] | None = None  # api: called with the tmp dir
    env: dict[str, str | None] = field(default_factory=dict)  # on top of BASE_ENV; None unsets
    setup: Callable[[Path], Any] | None = None  # makes the files the case needs (runs under `env`)
    expect: str = "error"            # "error" or "ok"
    must_name: tuple[str, ...] = ()  # error: in the error line; ok: in stdout + stderr
    code: int | None = None          # the exit code, where it matters (2 usage, 1 failure)
    check: Callable[[Path, "Run"], str | None] | None = None  # a problem (wrong or silent), or None
    subprocess: bool = False         # a real `python -m flashbuild` (real exit code and stderr)
    waiting: str = ""                # "lead: item N": xfail until that fix lands
    needs: str = ""                  # non-root, root, no-gpu, cpu-torch, toolchain
    input: str = ""                  # how the table shows the input (default: the args)
    danger: bool = False             # a failed check is "dangerous" (a write, delete or command outside its roots)
    pytest: bool = False             # args are pytest's, run in a subprocess with the plugin (surface plugin)

    def shown_input(self) -> str:
        if self.input:
            return self.input
        env = " ".join(f"{k}={v!r}" for k, v in self.env.items())
        return (env + " " if env else "") + " ".join(repr(a) if not a or any(c in a for c in " \n\r'\"$`") else a
                                                    for a in self.args)


@dataclass
class Run:
    code: int | None
    stdout: str = ""
    stderr: str = ""
    traceback: str = ""  # an exception nobody caught
    value: Any = None    # what an API call returned


@dataclass
class Verdict:
    outcome: str
    message: str  # the error line (or the API message), or a summary of what went wrong
    run: Run


# ---------------------------------------------------------------- running a case

def sub(value: Any, tmp: Path) -> Any:
    """`value` with TMP replaced by the tmp dir, inside strings, tuples, lists and dicts."""
    if isinstance(value, str):
        return value.replace(TMP, str(tmp))
    if isinstance(value, (list, tuple)):
        return type(value)(sub(v, tmp) for v in value)
    if isinstance(value, dict):
        return {k: sub(v, tmp) for k, v in value.items()}
    return value


def base_env(tmp: Path) -> dict[str, str | None]:
    """Every case runs with its own cache, a fake nvcc as CUDA_HOME, the real sources."""
    return {"FLASHBUILD_CACHE_DIR": str(tmp / "cache"), "FLASHBUILD_ROOT": None, "CUDA_HOME": str(tmp / "fake-cuda"),
            "CUDA_PATH": None, "FAKE_NVCC_LOG": str(tmp / "nvcc.log"), "FAKE_NVCC_SLEEP": None,
            "XDG_CACHE_HOME": str(tmp / "xdg"), "CXX": None}


@contextlib.contextmanager
def patched(environ: dict[str, str | None], cwd: Path):
    saved, old_cwd = dict(os.environ), os.getcwd()
    for key, value in environ.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(saved)


def _invoke(case: Case, tmp: Path, environ: dict[str, str | None]) -> Run:
    args = sub(list(case.args), tmp)
    if case.call is not None:
        from flashbuild.errors import FlashbuildError
        logs = io.StringIO()  # the build's progress lines (stderr), kept apart from the error
        try:
            with contextlib.redirect_stderr(logs), contextlib.redirect_stdout(logs):
                value = case.call(tmp)
        except FlashbuildError as exc:
            return Run(exc.exit_code, stdout=logs.getvalue(), stderr=f"flashbuild: error: {exc}")
        except Exception:  # noqa: BLE001 - the point: any other exception is a raw traceback
            return Run(None, stdout=logs.getvalue(), traceback=traceback.format_exc())
        return Run(0, stdout=logs.getvalue(), value=value)
    if case.pytest:
        return _invoke_pytest(args, tmp)
    if case.subprocess:
        full = {k: v for k, v in os.environ.items()}
        proc = subprocess.run([sys.executable, "-m", "flashbuild", *args], env=full, cwd=tmp, capture_output=True,
                              text=True, errors="replace", timeout=120)
        tb = proc.stderr if "Traceback (most recent call last)" in proc.stderr else ""
        return Run(proc.returncode, proc.stdout, proc.stderr, tb)
    from click.testing import CliRunner

    from flashbuild.cli import cli
    result = CliRunner().invoke(cli, args, catch_exceptions=True)
    tb = ""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        tb = "".join(traceback.format_exception(*result.exc_info))
    return Run(result.exit_code, result.stdout, result.stderr, tb)


def _invoke_pytest(args: list[str], tmp: Path) -> Run:
    """pytest with the plugin in a subprocess; its usage error (exit 4, `ERROR: ...`) is read as an
    error line, an INTERNALERROR as a traceback."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(REPO), environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "flashbuild.sources.pytest_slice", *args],
                              env=environ, cwd=tmp, capture_output=True, text=True, errors="replace", timeout=120)
    except subprocess.TimeoutExpired:
        return Run(None, traceback="pytest hung (120 s)")
    text = proc.stdout + proc.stderr
    if "INTERNALERROR" in text or "Traceback (most recent call last)" in text:
        return Run(proc.returncode, proc.stdout, proc.stderr, text[-3000:])
    usage = [line[len("ERROR: "):] for line in text.splitlines() if line.startswith("ERROR: ")]
    if proc.returncode == 4 and usage:
        return Run(2, proc.stdout, "flashbuild: error: " + usage[0])
    return Run(proc.returncode, proc.stdout, proc.stderr)


def run_case(case: Case, tmp: Path) -> Verdict:
    """Run one case in the empty directory `tmp` and judge it."""
    make_fake_cuda(tmp)
    environ = {**base_env(tmp), **sub(case.env, tmp)}
    with patched(environ, tmp):
        if case.setup is not None:
            case.setup(tmp)
        run = _invoke(case, tmp, environ)
        problem = case.check(tmp, run) if case.check is not None else None
    return judge(case, run, problem)


def judge(case: Case, run: Run, problem: str | None) -> Verdict:
    text = run.stdout + run.stderr
    if case.danger and problem:
        return Verdict("dangerous", problem, run)
    if run.traceback or "Traceback (most recent call last)" in text or BUG_LINE in text:
        last = (run.traceback or text).strip().splitlines()[-1]
        return Verdict("traceback", last, run)
    errors = [line for line in run.stderr.splitlines() if line.startswith("flashbuild: error:")]
    message = errors[0][len("flashbuild: error:"):].strip() if errors else ""
    if case.expect == "ok":
        if run.code != 0:
            return Verdict("wrong or silent", f"refused (exit {run.code}): {message or text.strip()[-200:]}", run)
        missing = [name for name in case.must_name if name not in text]
        if problem or missing:
            return Verdict("wrong or silent", problem or f"output does not mention {missing[0]!r}", run)
        return Verdict("rightly accepted", (run.stdout.strip().splitlines() or [""])[0], run)
    if run.code == 0:
        return Verdict("wrong or silent", f"accepted (exit 0){': ' + problem if problem else ''}", run)
    if problem:
        return Verdict("wrong or silent", problem, run)
    multiline_api = case.call is not None and "\n" in run.stderr.strip()
    if run.code not in (1, 2) or len(errors) != 1 or multiline_api:
        return Verdict("unclear error", f"exit {run.code}, {len(errors)} error lines: {run.stderr.strip()[-200:]}", run)
    missing = [name for name in case.must_name if name not in message]
    if missing:
        return Verdict("unclear error", f"does not name {missing[0]!r}: {message}", run)
    if case.code is not None and run.code != case.code:
        return Verdict("unclear error", f"exit {run.code}, expected {case.code}: {message}", run)
    return Verdict("clear error", message, run)


def skip_reason(case: Case) -> str | None:
    """Why this machine cannot run the case, or None."""
    from flashbuild import env
    if case.needs == "non-root" and os.geteuid() == 0:
        return "root ignores file modes"
    if case.needs == "root" and os.geteuid() != 0:
        return "needs root (chown to another user)"
    if case.needs == "no-gpu" and env.gpus():
        return "a GPU is present"
    if case.needs == "cpu-torch" and (env.torch_info() is None or env.torch_info().cuda is not None):
        return "torch has CUDA here"
    if case.needs == "toolchain" and (env.find_ninja() is None or env.cutlass_include_dir() is None
                                      or env.find_host_cxx() is None):
        return "ninja, CUTLASS or a host compiler is missing"
    return None


# ---------------------------------------------------------------- building blocks of cases

def sel(**over: str | None) -> tuple[str, ...]:
    """A one-variant selection's flags (fwd hdim 64 fp16 sm80, not causal, no features), with overrides."""
    values = {"hdim": "64", "dtype": "fp16", "arch": "sm80", "direction": "fwd", "causal": "off", **over}
    args = [arg for key, value in values.items() if value is not None for arg in (f"--{key}", value)]
    return (*args, "--no-local", "--no-softcap")


def dry(**over: str | None) -> tuple[str, ...]:
    return (*sel(**over), "--dry-run")


def build(*extra: str, **over: str | None) -> tuple[str, ...]:
    """A real (fake-nvcc) compile of the one-variant selection: ninja runs build.ninja."""
    return (*sel(**over), "--compile-only", *extra)


def payload(prefix: str = "-DX") -> str:
    """The issue's injection: new ninja rules after a newline, creating MARKER when ninja runs them."""
    return f"{prefix}\nrule evil\n  command = touch {MARKER}\nbuild {MARKER}: evil\n#"


def no_marker(tmp: Path, run: Run) -> str | None:
    return f"the injection ran: {tmp / 'pwned'} exists" if (tmp / "pwned").exists() else None


def nvcc_got(flag: str) -> Callable[[Path, Run], str | None]:
    """nvcc received `flag` (with TMP replaced) as one argument, and no injected command ran."""
    def check(tmp: Path, run: Run) -> str | None:
        want = sub(flag, tmp)
        log = tmp / "nvcc.log"
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
        if not calls:
            return "nvcc never ran"
        if not all(want in call for call in calls):
            return f"nvcc did not get {want!r} as one argument: {calls[0]}"
        return no_marker(tmp, run)
    return check


def pasteable(program: str, token: str) -> Callable[[Path, Run], str | None]:
    """The error's `program ...` hint (between backticks) splits, as a shell would, into arguments
    one of which is `token` (TMP replaced) or a path under it: it can be pasted."""
    def check(tmp: Path, run: Run) -> str | None:
        want = sub(token, tmp)
        hints = [h for h in re.findall(r"`([^`]*)`", run.stderr) if h.startswith(program + " ")]
        if not hints:
            return f"no `{program} ...` hint in the error"
        try:
            args = shlex.split(hints[0])
        except ValueError as exc:
            return f"the hint does not parse as a shell command ({exc}): {hints[0]}"
        if any(a == want or a.startswith(want + "/") for a in args):
            return None
        return f"pasted, the hint does not pass {want!r} as one argument: {args}"
    return check


def exists(*rels: str) -> Callable[[Path, Run], str | None]:
    def check(tmp: Path, run: Run) -> str | None:
        gone = [rel for rel in rels if not os.path.lexists(tmp / rel)]
        return f"{gone[0]} was removed" if gone else None
    return check


def absent(*texts: str) -> Callable[[Path, Run], str | None]:
    def check(tmp: Path, run: Run) -> str | None:
        found = [t for t in texts if t in run.stdout + run.stderr]
        return f"the output says {found[0]!r}" if found else None
    return check


def both(*checks: Callable[[Path, Run], str | None]) -> Callable[[Path, Run], str | None]:
    def check(tmp: Path, run: Run) -> str | None:
        return next((p for p in (c(tmp, run) for c in checks) if p), None)
    return check


def write(rel: str, content: str | bytes, mode: int | None = None) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        if mode is not None:
            path.chmod(mode)
    return setup


def mkdir(rel: str, mode: int = 0o700) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / rel).mkdir(parents=True, exist_ok=True)
        (tmp / rel).chmod(mode)
    return setup


def steps(*setups: Callable[[Path], Any]) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        for step in setups:
            step(tmp)
    return setup


def symlink(rel: str, target: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(sub(target, tmp), tmp / rel)
    return setup


def fake_nvcc(body: str, home: str = "cuda", mode: int = 0o755) -> Callable[[Path], None]:
    """A CUDA_HOME (tmp/<home>) whose bin/nvcc is this shell script."""
    return write(f"{home}/bin/nvcc", "#!/bin/sh\n" + body + "\n", mode)


# ---------------------------------------------------------------- the Python API

BASE_KW = dict(hdim=64, dtype="fp16", arch="sm80", direction="fwd", causal="off", features=[], compile_only=True)
DROP = object()


def api(fn: str = "build", **kw: Any) -> Callable[[Path], Any]:
    """flashbuild.build(...) (or load) of the one-variant selection with these keywords (DROP removes one)."""
    def call(tmp: Path) -> Any:
        import flashbuild
        base = dict(BASE_KW) if fn == "build" else {k: v for k, v in BASE_KW.items() if k != "compile_only"}
        merged = {k: v for k, v in {**base, **sub(kw, tmp)}.items() if v is not DROP}
        return getattr(flashbuild, fn)(**merged)
    return call


# ---------------------------------------------------------------- config files

CONFIG_BASE = {"hdim": "[64]", "dtype": '["fp16"]', "arch": '["sm80"]', "direction": '["fwd"]', "causal": '"off"',
               "features": "[]"}


def toml(head: str = "", **over: str | None) -> str:
    """A preset: `head` before the [selection] table, whose keys are CONFIG_BASE with overrides (raw TOML)."""
    keys = {**CONFIG_BASE, **over}
    body = "".join(f"{k} = {v}\n" for k, v in keys.items() if v is not None)
    return f"{head}[selection]\n{body}"


def config_case(id: str, content: str | bytes, expect: str = "error", must_name: tuple[str, ...] = ("c.toml",),
                **kw: Any) -> Case:
    return Case(f"config-{id}", "config", ("--config", f"{TMP}/c.toml", "--dry-run"), setup=write("c.toml", content),
                expect=expect, must_name=must_name, input=kw.pop("input", "c.toml: " + (
                    content if isinstance(content, str) else repr(content))[:70].replace("\n", " | ")), **kw)


# ---------------------------------------------------------------- bench result files

ROW = {"variant": "fwd_hdim64_fp16_sm80", "direction": "fwd", "hdim": 64, "dtype": "fp16", "causal": False,
       "seqlen": 1024, "batch": 16, "nheads": 32, "backend": "flashbuild", "ms": 1.5, "tflops": 91.6, "reps": 10,
       "note": "", "window_left": -1, "window_right": -1, "softcap": 0.0}


def results(rows: list | Any = None, **top: Any) -> str:
    data = {"format": "flashbuild-bench", "version": 1, "command": "flashbuild bench", "device": "H200", **top}
    data["results"] = [ROW] if rows is None else rows
    return json.dumps(data)


def row(**over: Any) -> list[dict]:
    return [{k: v for k, v in {**ROW, **over}.items() if v is not DROP}]


def results_case(id: str, content: str | bytes, expect: str = "error", must_name: tuple[str, ...] = ("r.json",),
                 flag: str = "--results", extra: tuple[str, ...] = (), **kw: Any) -> Case:
    args = ("bench", flag, f"{TMP}/r.json", *extra) if flag == "--results" else (
        "bench", "--results", f"{TMP}/good.json", flag, f"{TMP}/r.json", *extra)
    setup = steps(write("good.json", results()), write("r.json", content))
    shown = content if isinstance(content, str) else repr(content)
    return Case(f"results-{id}", "results", args, setup=setup, expect=expect, must_name=must_name,
                input=kw.pop("input", f"{flag} r.json: {shown[:90]}"), **kw)


def bench_out(id: str, flag: str, path: str, expect: str = "error", must_name: tuple[str, ...] = (),
              setup: Callable | None = None, **kw: Any) -> Case:
    return Case(f"results-{id}", "results", ("bench", "--results", f"{TMP}/good.json", flag, path),
                setup=steps(write("good.json", results()), *(setup and [setup] or [])), expect=expect,
                must_name=must_name or (flag,), input=f"--results good.json {flag} {path.replace(TMP + '/', '')}", **kw)


# ---------------------------------------------------------------- the cache

KEY = "sm80-fp16-h64-fwd-c0-fnone-deadbeef"


def cache_entry(name: str = KEY, manifest: str | bytes | None = '{"variants": ["fwd_hdim64_fp16_sm80"]}',
                where: str = "cache", marker: bool = True) -> Callable[[Path], None]:
    """A directory that looks like a build (build.ninja, manifest.json and, unless `marker` is false,
    the file flashbuild writes into each entry it makes) at tmp/<where>/<name>."""
    def setup(tmp: Path) -> None:
        from flashbuild.pipeline import cache

        (tmp / "cache").mkdir(mode=0o700, exist_ok=True)
        entry = tmp / where / name
        entry.mkdir(parents=True, mode=0o700)
        (entry / "build.ninja").write_text("# a build\n")
        if marker and hasattr(cache, "MARKER"):
            (entry / cache.MARKER).write_text(cache.MARKER_TEXT)
        if isinstance(manifest, bytes):
            (entry / "manifest.json").write_bytes(manifest)
        elif manifest is not None:
            (entry / "manifest.json").write_text(manifest)
    return setup


def real_build(tmp: Path) -> Path:
    """Build the one-variant selection into the cache (fake nvcc); returns its build dir."""
    import flashbuild
    return flashbuild.build(**BASE_KW).build_dir


def symlinked_build(tmp: Path) -> None:
    """The build's cache entry moved out of the cache and replaced by a link to it."""
    build_dir = real_build(tmp)
    shutil.move(build_dir, tmp / "planted")
    os.symlink(tmp / "planted", build_dir)


def chmod_build(mode: int) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        real_build(tmp).chmod(mode)
    return setup


def chown_build(tmp: Path) -> None:
    os.chown(real_build(tmp), 65534, 65534)


def private_cache(tmp: Path, run: Run) -> str | None:
    """Every dir of a fresh cache is 0700 and every file 0600 (nothing for group or others)."""
    root = tmp / "cache"
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            continue
        if info.st_mode & 0o077:
            return f"{path.relative_to(tmp)} is mode {stat.S_IMODE(info.st_mode):o}"
    return None


# ---------------------------------------------------------------- the cases

PWNED = {"check": no_marker}

CASES: list[Case] = [
    # ---- CLI: the selection
    Case("cli-hdim-superscript", "cli", dry(hdim="²"), must_name=("--hdim ²", "not an integer"), code=2, subprocess=True),
    Case("cli-hdim-negative", "cli", dry(hdim="-1"), must_name=("--hdim -1", "positive"), code=2,
         check=absent("not an integer")),
    Case("cli-hdim-zero", "cli", dry(hdim="0"), must_name=("--hdim 0", "positive"), code=2),
    Case("cli-hdim-80-padded", "cli", dry(hdim="80"), must_name=("--hdim 80", "hdim-96", "--hdim 96"), code=2),
    Case("cli-hdim-512", "cli", dry(hdim="512"), must_name=("--hdim 512", "--hdim 256"), code=2),
    Case("cli-hdim-float-exp", "cli", dry(hdim="1e3"), must_name=("--hdim 1e3",), code=2),
    Case("cli-hdim-float", "cli", dry(hdim="64.0"), must_name=("--hdim 64.0",), code=2),
    Case("cli-hdim-empty", "cli", dry(hdim=""), must_name=("--hdim", "empty"), code=2),
    Case("cli-hdim-commas", "cli", dry(hdim=",,"), must_name=("--hdim", "empty"), code=2),
    Case("cli-hdim-huge", "cli", dry(hdim="99999999999999999999"), must_name=("99999999999999999999",), code=2),
    Case("cli-hdim-arabic-digits", "cli", dry(hdim="٦٤"), must_name=("٦٤",), code=2),
    Case("cli-hdim-one-bad", "cli", dry(hdim="64,abc"), must_name=("--hdim abc",), code=2),
    Case("cli-hdim-hex", "cli", dry(hdim="0x40"), must_name=("--hdim 0x40",), code=2),
    Case("cli-hdim-shell", "cli", dry(hdim="64;touch pwned"), must_name=("--hdim", "touch pwned"), code=2,
         check=no_marker),
    Case("cli-hdim-newline", "cli", dry(hdim=payload("64")), must_name=("--hdim",), code=2, check=no_marker),
    Case("cli-hdim-undecodable-byte", "cli", dry(hdim=os.fsdecode(b"\xff")), must_name=("--hdim",), code=2,
         subprocess=True, input="--hdim $'\\xff' (a byte that is not UTF-8)"),
    Case("cli-hdim-padded-spaces", "cli", dry(hdim=" 64 "), expect="ok", must_name=("fwd_hdim64_fp16_sm80",)),
    Case("cli-hdim-repeated", "cli", dry(hdim="64,64"), expect="ok", must_name=("x hdim 64 x",)),
    Case("cli-dtype-fp32", "cli", dry(dtype="fp32"), must_name=("--dtype fp32", "fp16, bf16"), code=2),
    Case("cli-dtype-float16", "cli", dry(dtype="float16"), must_name=("--dtype float16", "use --dtype fp16"), code=2),
    Case("cli-dtype-bfloat16", "cli", dry(dtype="bfloat16"), must_name=("use --dtype bf16",), code=2),
    Case("cli-dtype-empty", "cli", dry(dtype=""), must_name=("--dtype", "empty"), code=2),
    Case("cli-dtype-upper", "cli", dry(dtype="FP16"), expect="ok", must_name=("fwd_hdim64_fp16_sm80",)),
    Case("cli-arch-sm_90", "cli", dry(arch="sm_90"), must_name=("--arch sm_90", "use --arch sm90"), code=2,
         subprocess=True),
    Case("cli-arch-90", "cli", dry(arch="90"), must_name=("--arch 90", "use --arch sm90"), code=2),
    Case("cli-arch-sm_90a", "cli", dry(arch="sm_90a"), must_name=("--arch sm_90a", "use --arch sm90"), code=2),
    Case("cli-arch-sm90a", "cli", dry(arch="sm90a"), must_name=("use --arch sm90",), code=2),
    Case("cli-arch-compute_80", "cli", dry(arch="compute_80"), must_name=("use --arch sm80",), code=2),
    Case("cli-arch-sm87", "cli", dry(arch="sm87"), must_name=("--arch sm87", "use --arch sm86"), code=2),
    Case("cli-arch-sm75", "cli", dry(arch="sm75"), must_name=("--arch sm75", "sm80, sm86, sm89, sm90"), code=2),
    Case("cli-arch-upper", "cli", dry(arch="SM90"), expect="ok", must_name=("fwd_hdim64_fp16_sm90",)),
    Case("cli-arch-native-no-gpu", "cli", dry(arch="native"), must_name=("--arch native", "no GPU"), code=2,
         needs="no-gpu"),
    Case("cli-arch-shell", "cli", dry(arch="sm80;touch pwned"), must_name=("--arch",), code=2, check=no_marker),
    Case("cli-direction-bad", "cli", dry(direction="sideways"), must_name=("--direction sideways",), code=2),
    Case("cli-direction-forward", "cli", dry(direction="forward"), must_name=("use --direction fwd",), code=2),
    Case("cli-direction-empty", "cli", dry(direction=""), must_name=("--direction", "empty"), code=2),
    Case("cli-direction-gaps", "cli", dry(direction="fwd,,bwd"), expect="ok", must_name=("bwd_hdim64_fp16_sm80",)),
    Case("cli-causal-maybe", "cli", dry(causal="maybe"), must_name=("--causal maybe", "on, off, both"), code=2),
    Case("cli-causal-yes", "cli", dry(causal="yes"), must_name=("--causal yes", "use --causal on"), code=2),
    Case("cli-causal-empty", "cli", dry(causal=""), must_name=("--causal",), code=2),
    Case("cli-causal-upper", "cli", dry(causal="ON"), expect="ok", must_name=("fwd_hdim64_fp16_causal_sm80",)),
    Case("cli-config-missing-toml", "cli", dry(arch=None) + ("--config", "x.toml"), must_name=("--config x.toml",),
         code=2, check=absent("x.toml.toml"), subprocess=True),
    Case("cli-config-no-preset", "cli", dry() + ("--config", "nope"), must_name=("--config nope", "ci-compile"),
         code=2),
    Case("cli-config-near-preset", "cli", dry() + ("--config", "dev-hdim64"), must_name=("use --config dev-hdim64-sm90",),
         code=2),
    Case("cli-config-preset-with-suffix", "cli", dry() + ("--config", "ci-compile.toml"),
         must_name=("--config ci-compile.toml", "use --config ci-compile"), code=2, check=absent("ci-compile.toml.toml")),
    Case("cli-config-directory", "cli", dry() + ("--config", TMP), must_name=("--config", "directory"), code=2),
    Case("cli-config-empty", "cli", dry() + ("--config", ""), must_name=("--config", "empty"), code=2),
    Case("cli-config-preset", "cli", ("--config", "ci-compile", "--dry-run"), expect="ok",
         must_name=("fwd_hdim64_fp16_sm90",)),
    Case("cli-jobs-text", "cli", dry() + ("--jobs", "abc"), must_name=("--jobs",), code=2),
    Case("cli-jobs-zero", "cli", dry() + ("--jobs", "0"), must_name=("--jobs 0",), code=2),
    Case("cli-jobs-negative", "cli", dry() + ("--jobs", "-3"), must_name=("--jobs",), code=2),
    Case("cli-jobs-float", "cli", dry() + ("--jobs", "1.5"), must_name=("--jobs",), code=2),
    Case("cli-debug-and-lineinfo", "cli", dry() + ("--debug", "--lineinfo"), must_name=("--debug", "--lineinfo"),
         code=2),
    Case("cli-missing-value", "cli", ("--hdim",), must_name=("--hdim", "requires an argument"), code=2),
    Case("cli-unknown-option", "cli", ("--hdims", "64"), must_name=("--hdims",), code=2),
    Case("cli-unknown-command", "cli", ("frobnicate",), must_name=("frobnicate",), code=2),
    Case("cli-version", "cli", ("--version",), expect="ok", must_name=("flashbuild",)),
    Case("cli-list-json", "cli", ("list", "--json"), expect="ok", must_name=('"axes"',)),
    # ---- CLI: values that reach build.ninja and the shell (a fake nvcc compiles; ninja runs the file)
    Case("cli-nvcc-flag-newline-injection", "cli", build("--nvcc-flag", payload()), must_name=("--nvcc-flag",),
         code=2, subprocess=True, **PWNED),
    Case("cli-nvcc-flag-cr", "cli", build("--nvcc-flag", "-DX\rrule evil"), must_name=("--nvcc-flag",), code=2,
         **PWNED),
    # nvcc runs its steps through a shell of its own, inside double quotes (test_build_safety.py): what
    # that shell acts on ($, backticks, ", \) would run there, whatever build.ninja quoted, so it is refused.
    Case("cli-nvcc-flag-command-substitution", "cli", build("--nvcc-flag", f"-DX=$(touch {MARKER})"),
         must_name=("--nvcc-flag",), code=2, **PWNED),
    Case("cli-nvcc-flag-backticks", "cli", build("--nvcc-flag", f"-DX=`touch {MARKER}`"),
         must_name=("--nvcc-flag",), code=2, subprocess=True, **PWNED),
    Case("cli-nvcc-flag-quote-break", "cli", build("--nvcc-flag", f"-DX=';touch {MARKER};'"), expect="ok",
         check=nvcc_got(f"-DX=';touch {MARKER};'")),
    Case("cli-nvcc-flag-dollar-var", "cli", build("--nvcc-flag", "-DX=$HOME"), must_name=("--nvcc-flag",), code=2),
    Case("cli-nvcc-flag-lone-dollar", "cli", build("--nvcc-flag", "$"), must_name=("--nvcc-flag",), code=2),
    Case("cli-nvcc-flag-space", "cli", build("--nvcc-flag", "-DX=a b"), expect="ok", check=nvcc_got("-DX=a b")),
    Case("cli-nvcc-flag-colon", "cli", build("--nvcc-flag", "-DX=a:b"), expect="ok", check=nvcc_got("-DX=a:b")),
    Case("cli-nvcc-flag-quotes", "cli", build("--nvcc-flag", '-DX="q"'), must_name=("--nvcc-flag",), code=2),
    Case("cli-nvcc-flag-empty", "cli", build("--nvcc-flag", ""), must_name=("--nvcc-flag",), code=2),
    Case("cli-launcher-newline-injection", "cli", build("--launcher", payload("env")), must_name=("--launcher",),
         code=2, subprocess=True, **PWNED),
    Case("cli-launcher-missing", "cli", build("--launcher", "no-such-launcher-xyz"),
         must_name=("--launcher no-such-launcher-xyz", "not found"), code=2),
    Case("cli-launcher-command-substitution", "cli", build("--launcher", f"$(touch {MARKER})"),
         must_name=("--launcher",), code=2, **PWNED),
    Case("cli-launcher-env", "cli", build("--launcher", "env"), expect="ok", check=nvcc_got("-c")),
    Case("cli-build-dir-newline-injection", "cli", build("--build-dir", f"{TMP}/b" + payload("")),
         must_name=("--build-dir",), code=2, subprocess=True, **PWNED),
    Case("cli-build-dir-dollar", "cli", build("--build-dir", f"{TMP}/b$x"), must_name=("--build-dir",), code=2),
    Case("cli-build-dir-command-substitution", "cli", build("--build-dir", f"{TMP}/b $(touch {MARKER})"),
         must_name=("--build-dir",), code=2, **PWNED),
    Case("cli-build-dir-colon", "cli", build("--build-dir", f"{TMP}/b:c"), expect="ok",
         check=exists("b:c/obj/fwd_hdim64_fp16_sm80.o")),
    Case("cli-build-dir-under-a-file", "cli", build("--build-dir", f"{TMP}/f/sub"), setup=write("f", "x"),
         must_name=("--build-dir",), waiting=""),
    Case("cli-build-dir-is-a-file", "cli", build("--build-dir", f"{TMP}/f"), setup=write("f", "x"),
         must_name=("--build-dir",), code=2),
    Case("cli-build-dir-sysfs", "cli", build("--build-dir", "/sys/flashbuild-hostile-test"),
         must_name=("--build-dir", "/sys/flashbuild-hostile-test")),
    Case("cli-build-dir-read-only", "cli", build("--build-dir", f"{TMP}/ro/b"), setup=mkdir("ro", 0o555),
         must_name=("--build-dir",), needs="non-root"),
    # ---- CLI: test, bench, inspect, watch, clean
    Case("cli-test-no-gpu", "cli", ("test", *sel()), must_name=("GPU",), code=2, needs="no-gpu"),
    Case("cli-test-json-under-a-file", "cli", ("test", *sel(), "--json", f"{TMP}/f/rows.json"), setup=write("f", "x"),
         must_name=("--json", "f/rows.json")),
    Case("cli-test-seed-text", "cli", ("test", *sel(), "--seed", "abc"), must_name=("--seed",), code=2),
    Case("cli-test-shapes-bad", "cli", ("test", *sel(), "--shapes", "huge"), must_name=("--shapes",), code=2),
    Case("cli-bench-no-gpu", "cli", ("bench", *sel()), must_name=("GPU",), code=2, needs="no-gpu"),
    Case("cli-bench-reps-zero", "cli", ("bench", "--reps", "0"), must_name=("--reps",), code=2),
    Case("cli-bench-reps-text", "cli", ("bench", "--reps", "abc"), must_name=("--reps",), code=2),
    Case("cli-bench-alone-zero", "cli", ("bench", "--alone", "0"), must_name=("--alone",), code=2),
    Case("cli-bench-alone-inf", "cli", ("bench", "--alone", "inf"), must_name=("--alone",), code=2),
    Case("cli-bench-alone-an-hour", "cli", ("bench", "--alone", "3600"), must_name=("--alone",), code=2),
    Case("cli-bench-seqlens-superscript", "cli", ("bench", "--seqlens", "²"), must_name=("--seqlens", "²"), code=2,
         subprocess=True),
    Case("cli-bench-seqlens-empty", "cli", ("bench", "--seqlens", ""), must_name=("--seqlens",), code=2),
    Case("cli-bench-seqlens-zero", "cli", ("bench", "--seqlens", "0"), must_name=("--seqlens",), code=2),
    Case("cli-bench-seqlens-text", "cli", ("bench", "--seqlens", "4k,abc"), must_name=("--seqlens", "abc"), code=2),
    Case("cli-bench-seqlens-negative", "cli", ("bench", "--seqlens", "-1k"), must_name=("--seqlens",), code=2),
    Case("cli-bench-window-text", "cli", ("bench", "--window", "abc"), must_name=("--window",), code=2),
    Case("cli-bench-window-none", "cli", ("bench", "--window", "-1,-1"), must_name=("--window",), code=2),
    Case("cli-bench-window-three", "cli", ("bench", "--window", "1,2,3"), must_name=("--window",), code=2),
    Case("cli-bench-softcap-nan", "cli", ("bench", *sel(), "--softcap", "nan"), must_name=("--softcap",), code=2),
    Case("cli-bench-softcap-inf", "cli", ("bench", *sel(), "--softcap", "inf"), must_name=("--softcap",), code=2),
    Case("cli-bench-softcap-negative", "cli", ("bench", "--softcap", "-1"), must_name=("--softcap",), code=2),
    Case("cli-inspect-sass-unknown", "cli", ("inspect", *sel(), "--sass", "fwd_hdim64_fp16_sm90"),
         must_name=("--sass fwd_hdim64_fp16_sm90", "use --sass fwd_hdim64_fp16_sm80"), code=2),
    Case("cli-watch-interval-zero", "cli", ("watch", *sel(), "--interval", "0"), must_name=("--interval",), code=2),
    Case("cli-watch-interval-nan", "cli", ("watch", *sel(), "--interval", "nan"), must_name=("--interval",), code=2),
    Case("cli-watch-interval-inf", "cli", ("watch", *sel(), "--interval", "inf"), must_name=("--interval",), code=2),
    Case("cli-clean-nothing", "cli", ("clean",), must_name=("--all",), code=2),
    Case("cli-clean-path-escape", "cli", ("clean", "../outside"), setup=cache_entry("outside", where=""),
         must_name=("../outside",), code=2, check=exists("outside/manifest.json")),
    Case("cli-clean-empty-key", "cli", ("clean", ""), must_name=("no cached build",), code=2),

    # ---- the Python API (flashbuild.build / load keywords)
    Case("api-nvcc-flags-string", "api", call=api(nvcc_flags="-G"), expect="ok", check=nvcc_got("-G"),
         input='build(nvcc_flags="-G")'),
    Case("api-nvcc-flags-tuple", "api", call=api(nvcc_flags=("-G", "-DX=1")), expect="ok", check=nvcc_got("-DX=1"),
         input='build(nvcc_flags=("-G", "-DX=1"))'),
    Case("api-nvcc-flags-newline-injection", "api", call=api(nvcc_flags=[payload()]), must_name=("nvcc",),
         input="build(nvcc_flags=[INJECTION])", **PWNED),
    Case("api-nvcc-flags-string-injection", "api", call=api(nvcc_flags=payload()), must_name=("nvcc",),
         input="build(nvcc_flags=INJECTION)", **PWNED),
    Case("api-nvcc-flags-int", "api", call=api(nvcc_flags=["-G", 5]), must_name=("nvcc_flags",),
         input='build(nvcc_flags=["-G", 5])'),
    Case("api-nvcc-flags-dict", "api", call=api(nvcc_flags={"-G": 1}), must_name=("nvcc_flags",),
         input='build(nvcc_flags={"-G": 1})'),
    Case("api-nvcc-flags-bytes", "api", call=api(nvcc_flags=b"-G"), must_name=("nvcc_flags",),
         input='build(nvcc_flags=b"-G")'),
    Case("api-debug-no", "api", call=api(debug="no"), must_name=("debug",), input='build(debug="no")'),
    Case("api-debug-int", "api", call=api(debug=1), must_name=("debug",), input="build(debug=1)"),
    Case("api-lineinfo-yes", "api", call=api(lineinfo="yes"), must_name=("lineinfo",), input='build(lineinfo="yes")'),
    Case("api-verbose-str", "api", call=api(verbose="true"), must_name=("verbose",), input='build(verbose="true")'),
    Case("api-compile-only-str", "api", call=api(compile_only="False"), must_name=("compile_only",),
         input='build(compile_only="False")'),
    Case("api-no-local-str", "api", call=api(no_local="yes"), must_name=("no_local",), input='build(no_local="yes")'),
    Case("api-jobs-str", "api", call=api(jobs="4"), must_name=("jobs",), input='build(jobs="4")'),
    Case("api-jobs-zero", "api", call=api(jobs=0), must_name=("jobs",), input="build(jobs=0)"),
    Case("api-jobs-bool", "api", call=api(jobs=True), must_name=("jobs",), input="build(jobs=True)"),
    Case("api-jobs-float", "api", call=api(jobs=2.5), must_name=("jobs",), input="build(jobs=2.5)"),
    Case("api-build-dir-int", "api", call=api(build_dir=123), must_name=("build_dir",), input="build(build_dir=123)"),
    Case("api-build-dir-empty", "api", call=api(build_dir=""), must_name=("build_dir",), input='build(build_dir="")'),
    Case("api-build-dir-list", "api", call=api(build_dir=["a"]), must_name=("build_dir",),
         input='build(build_dir=["a"])'),
    Case("api-build-dir-path", "api", call=lambda tmp: api(build_dir=tmp / "my build")(tmp), expect="ok",
         check=exists("my build/obj/fwd_hdim64_fp16_sm80.o"), input='build(build_dir=Path("my build"))'),
    Case("api-launcher-int", "api", call=api(launcher=5), must_name=("launcher",), input="build(launcher=5)"),
    Case("api-config-int", "api", call=api(config=5), must_name=("config",), input="build(config=5)"),
    Case("api-config-missing", "api", call=api(config="x.toml"), must_name=("x.toml",), check=absent("x.toml.toml"),
         input='build(config="x.toml")'),
    Case("api-unknown-keyword", "api", call=api(hdims=64), must_name=("hdims",), input="build(hdims=64)"),
    Case("api-hdim-superscript", "api", call=api(hdim="²"), must_name=("²",), input='build(hdim="²")'),
    Case("api-hdim-negative", "api", call=api(hdim=-1), must_name=("-1", "positive"), input="build(hdim=-1)"),
    Case("api-hdim-float", "api", call=api(hdim=64.0), must_name=("64.0",), input="build(hdim=64.0)"),
    Case("api-hdim-bool", "api", call=api(hdim=True), must_name=("True",), input="build(hdim=True)"),
    Case("api-hdim-dict", "api", call=api(hdim={"a": 1}), must_name=("hdim",), input='build(hdim={"a": 1})'),
    Case("api-hdim-none-in-list", "api", call=api(hdim=[64, None]), must_name=("None",), input="build(hdim=[64, None])"),
    Case("api-hdim-mixed-list", "api", call=api(hdim=[64, "128"]), expect="ok", input='build(hdim=[64, "128"])'),
    Case("api-dtype-int", "api", call=api(dtype=16), must_name=("dtype", "16"), input="build(dtype=16)"),
    Case("api-arch-sm_90", "api", call=api(arch="sm_90"), must_name=("sm_90", "sm90"), input='build(arch="sm_90")'),
    Case("api-causal-int", "api", call=api(causal=1), must_name=("causal",), input="build(causal=1)"),
    Case("api-causal-bool", "api", call=api(causal=True), expect="ok", input="build(causal=True)"),
    Case("api-features-bogus", "api", call=api(features="bogus"), must_name=("bogus",), input='build(features="bogus")'),
    Case("api-features-int", "api", call=api(features=5), must_name=("features",), input="build(features=5)"),
    Case("api-features-none", "api", call=api(features="none"), expect="ok", input='build(features="none")'),
    Case("api-load-compile-only", "api", call=api("load", compile_only=True), must_name=("compile_only",),
         input="load(compile_only=True)"),
    Case("api-load-cpu-torch", "api", call=api("load"), must_name=("torch",), needs="cpu-torch",
         input="load(hdim=64, ...) with a CPU-only torch"),
    Case("api-load-debug-str", "api", call=api("load", debug="no"), must_name=("debug",), input='load(debug="no")'),

    # ---- config files (--config FILE --dry-run; the flags do not override the key under test)
    config_case("not-toml", "this is not toml", must_name=("c.toml", "not valid TOML")),
    config_case("unclosed-table", "[selection\nhdim = 64\n", must_name=("c.toml", "not valid TOML")),
    config_case("binary", b"\x00\xff\xfe\x89PNG\r\n", must_name=("c.toml", "not a text file")),
    config_case("latin1", "# caf\xe9\n".encode("latin-1") + toml().encode(), must_name=("c.toml",)),
    Case("config-empty", "config", ("--config", f"{TMP}/c.toml", *dry()), setup=write("c.toml", ""), expect="ok",
         must_name=("fwd_hdim64_fp16_sm80",), input="c.toml: (empty), the flags select"),
    config_case("selection-not-a-table", "selection = 5\n", must_name=("c.toml", "selection")),
    config_case("selection-array", "selection = [1, 2]\n", must_name=("c.toml", "selection")),
    config_case("description-int", toml("description = 5\n"), must_name=("c.toml", "description")),
    config_case("unknown-table", toml() + "[build]\njobs = 4\n", must_name=("c.toml", "build")),
    config_case("unknown-key", toml(hdims="[64]"), must_name=("c.toml", "hdims")),
    config_case("nvcc-flags-injection", toml(nvcc_flags=json.dumps([payload()])), must_name=("c.toml", "nvcc_flags"),
                input="c.toml: [selection] nvcc_flags = [INJECTION]", **PWNED),
    config_case("hdim-text", toml(hdim='"abc"'), must_name=("c.toml", "hdim abc")),
    config_case("hdim-negative", toml(hdim="-1"), must_name=("hdim -1", "positive")),
    config_case("hdim-float", toml(hdim="64.5"), must_name=("hdim",)),
    config_case("hdim-bool", toml(hdim="true"), must_name=("hdim",)),
    config_case("hdim-empty", toml(hdim="[]"), must_name=("hdim", "empty")),
    config_case("hdim-table", toml(hdim="{a = 1}"), must_name=("hdim",)),
    config_case("hdim-nested", toml(hdim="[[64]]"), must_name=("hdim",)),
    config_case("hdim-80", toml(hdim="80"), must_name=("hdim 80", "set hdim = 96 in c.toml")),
    config_case("hdim-superscript", toml(hdim='"²"'), must_name=("hdim ²",)),
    config_case("dtype-int", toml(dtype="5"), must_name=("dtype 5",)),
    config_case("dtype-mixed", toml(dtype='["fp16", 16]'), must_name=("dtype 16",)),
    config_case("arch-int", toml(arch="90"), must_name=("arch 90", 'set arch = "sm90" in c.toml')),
    config_case("arch-sm_90", toml(arch='"sm_90"'), must_name=("arch sm_90", "sm90")),
    config_case("causal-int", toml(causal="1"), must_name=("causal",)),
    config_case("causal-list", toml(causal='["on"]'), must_name=("causal",)),
    config_case("causal-bool", toml(causal="true"), expect="ok", must_name=("fwd_hdim64_fp16_causal_sm80",)),
    config_case("direction-all", toml(direction='"all"'), must_name=("direction all",)),
    config_case("features-bogus", toml(features='"bogus"'), must_name=("features bogus",)),
    config_case("features-int", toml(features="5"), must_name=("features",)),
    config_case("features-int-item", toml(features="[1]"), must_name=("features",)),
    config_case("features-none", toml(features='"none"'), expect="ok", must_name=("fwd_hdim64_fp16_sm80",)),
    config_case("features-local", toml(features='["local"]'), expect="ok", must_name=("fwd_hdim64_fp16_sm80_local",)),
    config_case("unknown-key-and-valid", toml(hdim="[64]", arch='["sm80"]', extra='"x"'), must_name=("extra",)),
    Case("config-a-directory", "config", ("--config", f"{TMP}/c.toml", "--dry-run"), setup=mkdir("c.toml"),
         must_name=("c.toml", "directory"), code=2, input="--config c.toml/ (a directory)"),
    Case("config-unreadable", "config", ("--config", f"{TMP}/c.toml", "--dry-run"),
         setup=write("c.toml", toml(), 0o000), must_name=("c.toml", "cannot read"), needs="non-root",
         input="--config c.toml (mode 000)"),
    Case("config-io-error", "config", ("--config", "/proc/self/mem", "--dry-run"), must_name=("/proc/self/mem",),
         subprocess=True, input="--config /proc/self/mem (read fails: EIO)"),
    Case("config-fifo", "config", ("--config", f"{TMP}/c.toml", "--dry-run"),
         setup=lambda tmp: os.mkfifo(tmp / "c.toml"), must_name=("c.toml", "not a regular file"),
         input="--config c.toml (a FIFO: reading would block)"),
    Case("config-broken-link", "config", ("--config", f"{TMP}/c.toml", "--dry-run"),
         setup=symlink("c.toml", f"{TMP}/nowhere.toml"), must_name=("c.toml", "broken link"),
         input="--config c.toml (a broken link)"),
    Case("config-nvcc-flags-table-injection", "config", ("--config", f"{TMP}/c.toml", *build()),
         setup=write("c.toml", toml("nvcc_flags = " + json.dumps([payload()]) + "\n")),
         must_name=("c.toml", "nvcc_flags"), input="c.toml: nvcc_flags = [INJECTION] (top level), then a build",
         **PWNED),

    # ---- environment variables
    Case("env-cache-dir-is-a-file", "env", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/f"}, setup=write("f", "x"),
         must_name=("FLASHBUILD_CACHE_DIR",), subprocess=True),
    Case("env-cache-dir-under-a-file", "env", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/f/cache"},
         setup=write("f", "x"), must_name=("FLASHBUILD_CACHE_DIR",)),
    Case("env-cache-dir-read-only", "env", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/ro"}, setup=mkdir("ro", 0o555),
         must_name=("FLASHBUILD_CACHE_DIR",), needs="non-root"),
    Case("env-cache-dir-under-read-only", "env", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/ro/cache"},
         setup=mkdir("ro", 0o555), must_name=("FLASHBUILD_CACHE_DIR",), needs="non-root"),
    Case("env-cache-dir-sysfs", "env", build(), env={"FLASHBUILD_CACHE_DIR": "/sys/flashbuild-hostile-test"},
         must_name=("FLASHBUILD_CACHE_DIR", "/sys/flashbuild-hostile-test")),
    Case("env-cache-dir-newline-injection", "env", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/c" + payload("")},
         must_name=("FLASHBUILD_CACHE_DIR",), subprocess=True, **PWNED),
    Case("env-cache-dir-dollar", "env", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/c$x"},
         must_name=("FLASHBUILD_CACHE_DIR",), code=2),
    Case("env-cache-dir-command-substitution", "env", build(),
         env={"FLASHBUILD_CACHE_DIR": f"{TMP}/c $(touch {MARKER}) `touch {MARKER}`"},
         must_name=("FLASHBUILD_CACHE_DIR",), code=2, **PWNED),
    Case("env-cache-dir-relative", "env", build(), env={"FLASHBUILD_CACHE_DIR": "rel/cache"}, expect="ok",
         check=lambda tmp, run: None if (tmp / "rel" / "cache").is_dir() else "no cache in ./rel/cache"),
    Case("env-cache-dir-tilde", "env", build(), env={"FLASHBUILD_CACHE_DIR": "~/fb-cache", "HOME": f"{TMP}/home"},
         setup=mkdir("home"), expect="ok",
         check=lambda tmp, run: None if (tmp / "home" / "fb-cache").is_dir() else "~ was not expanded"),
    Case("env-cache-dir-empty", "env", build(), env={"FLASHBUILD_CACHE_DIR": ""}, must_name=("FLASHBUILD_CACHE_DIR",)),
    Case("env-cache-dir-symlink-root", "env", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/link"},
         setup=steps(mkdir("real"), symlink("link", f"{TMP}/real")), expect="ok", check=nvcc_got("-c")),
    Case("env-cache-dir-list-file", "env", ("list",), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/f"}, setup=write("f", "x"),
         expect="ok", must_name=("FLASHBUILD_CACHE_DIR",)),
    Case("env-cache-dir-doctor-file", "env", ("doctor",), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/f"},
         setup=write("f", "x"), must_name=("cache", "FLASHBUILD_CACHE_DIR"), code=1, check=lambda tmp, run: None if re.search(
             r"^WRONG\s+cache .*FLASHBUILD_CACHE_DIR", run.stdout, re.M) else "doctor's cache line is not WRONG"),
    Case("env-cache-dir-doctor-under-a-file", "env", ("doctor",), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/f/cache"},
         setup=write("f", "x"), must_name=("cache", "FLASHBUILD_CACHE_DIR"), code=1),
    Case("env-cache-dir-default-no-home", "env", ("list",), env={"FLASHBUILD_CACHE_DIR": None, "HOME": None},
         expect="ok", must_name=("cached builds in",)),
    Case("env-root-no-templates", "env", dry(), env={"FLASHBUILD_ROOT": f"{TMP}/root"},
         setup=steps(mkdir("root/kernels"), mkdir("root/configs")), must_name=("FLASHBUILD_ROOT", "templates/"),
         subprocess=True),
    Case("env-root-no-templates-build", "env", build(), env={"FLASHBUILD_ROOT": f"{TMP}/root"},
         setup=steps(mkdir("root/kernels"), mkdir("root/configs")), must_name=("FLASHBUILD_ROOT", "templates/"),
         check=absent("TemplateNotFound")),
    Case("env-root-missing", "env", dry(), env={"FLASHBUILD_ROOT": f"{TMP}/nowhere"}, must_name=("FLASHBUILD_ROOT",)),
    Case("env-root-file", "env", dry(), env={"FLASHBUILD_ROOT": f"{TMP}/f"}, setup=write("f", "x"),
         must_name=("FLASHBUILD_ROOT",)),
    Case("env-root-no-configs-preset", "env", ("--config", "ci-compile", "--dry-run"),
         env={"FLASHBUILD_ROOT": f"{TMP}/root"}, setup=steps(mkdir("root/kernels"), mkdir("root/templates")),
         must_name=("FLASHBUILD_ROOT", "configs/")),
    Case("env-root-empty", "env", dry(), env={"FLASHBUILD_ROOT": ""}, expect="ok", must_name=("fwd_hdim64_fp16_sm80",)),
    Case("env-root-doctor", "env", ("doctor",), env={"FLASHBUILD_ROOT": f"{TMP}/root"},
         setup=steps(mkdir("root/kernels"), mkdir("root/configs")), must_name=("kernels", "FLASHBUILD_ROOT"), code=1,
         check=lambda tmp, run: None if "FLASHBUILD_ROOT" in run.stdout else "doctor does not name FLASHBUILD_ROOT"),
    Case("env-cuda-home-missing-doctor", "env", ("doctor",), env={"CUDA_HOME": f"{TMP}/nowhere"},
         must_name=("CUDA_HOME", "nowhere", "does not exist"), code=1, subprocess=True,
         check=lambda tmp, run: None if re.search(r"^WRONG\s+CUDA_HOME ", run.stdout, re.M) else "no CUDA_HOME line"),
    Case("env-cuda-home-missing-dry-run", "env", dry(), env={"CUDA_HOME": f"{TMP}/nowhere"}, expect="ok",
         must_name=("CUDA_HOME",)),
    Case("env-cuda-home-broken-nvcc-doctor", "env", ("doctor",), env={"CUDA_HOME": f"{TMP}/cuda"},
         setup=fake_nvcc("echo 'nvcc: error while loading shared libraries' >&2; exit 127"),
         must_name=("nvcc broken", "exited 127", "error while loading shared libraries"), code=1, subprocess=True, check=lambda tmp, run: None if re.search(r"^BROKEN\s+nvcc ", run.stdout, re.M)
         else "doctor reports the broken nvcc as OK"),
    Case("env-cuda-home-broken-nvcc-build", "env", build(), env={"CUDA_HOME": f"{TMP}/cuda"},
         setup=fake_nvcc("echo 'nvcc: error while loading shared libraries' >&2; exit 127"),
         must_name=("fwd_hdim64_fp16_sm80",), code=1),
    Case("env-rerun-hint-quoted", "env", build("--nvcc-flag", "-DX=a b"), env={"CUDA_HOME": f"{TMP}/cuda"},
         setup=fake_nvcc("echo 'nvcc: error while loading shared libraries' >&2; exit 127"),
         must_name=("fwd_hdim64_fp16_sm80", "rerun"), code=1, check=pasteable("flashbuild", "--nvcc-flag=-DX=a b"),
         input="a failing build with --nvcc-flag '-DX=a b': its rerun hint, pasted"),
    Case("env-cuda-home-nvcc-directory-doctor", "env", ("doctor",), env={"CUDA_HOME": f"{TMP}/cuda"},
         setup=mkdir("cuda/bin/nvcc"), must_name=("CUDA_HOME", "not a file"), code=1),
    Case("env-cuda-home-nvcc-not-executable", "env", ("doctor",), env={"CUDA_HOME": f"{TMP}/cuda"},
         setup=fake_nvcc("exit 0", mode=0o644), must_name=("CUDA_HOME", "not executable"), code=1),
    Case("env-cuda-home-nvcc-broken-link", "env", ("doctor",), env={"CUDA_HOME": f"{TMP}/cuda"},
         setup=symlink("cuda/bin/nvcc", f"{TMP}/gone"), must_name=("CUDA_HOME", "broken link"), code=1),
    Case("env-cuda-home-is-a-file", "env", ("doctor",), env={"CUDA_HOME": f"{TMP}/f"}, setup=write("f", "x"),
         must_name=("CUDA_HOME", "not a directory"), code=1),
    Case("env-cuda-path-missing-doctor", "env", ("doctor",), env={"CUDA_HOME": None, "CUDA_PATH": f"{TMP}/nowhere"},
         must_name=("CUDA_PATH", "nowhere"), code=1),
    Case("env-cuda-home-garbage-version", "env", ("doctor",), env={"CUDA_HOME": f"{TMP}/cuda"},
         setup=fake_nvcc("echo hello"), expect="ok", must_name=("version unknown",), needs="toolchain"),
    Case("env-cuda-home-fake-ok-doctor", "env", ("doctor",), expect="ok", must_name=("fake-cuda/bin/nvcc",),
         needs="toolchain"),
    Case("env-cxx-false-doctor", "env", ("doctor",), env={"CXX": "/bin/false"}, must_name=("host c++", "/bin/false"),
         code=1),
    Case("env-cxx-missing-doctor", "env", ("doctor",), env={"CXX": "no-such-cxx"}, expect="ok",
         must_name=("CXX=no-such-cxx",), needs="toolchain"),

    # ---- the cache (entries made by hand or by a fake-nvcc build)
    Case("cache-fresh-is-private", "cache", build(), expect="ok", check=private_cache,
         input="a fresh cache: dirs 0700, files 0600"),
    Case("cache-root-world-writable", "cache", build(), setup=mkdir("cache", 0o777),
         must_name=("FLASHBUILD_CACHE_DIR", "writ"), input="cache root mode 777"),
    Case("cache-root-group-writable", "cache", build(), setup=mkdir("cache", 0o770),
         must_name=("FLASHBUILD_CACHE_DIR", "writ"), input="cache root mode 770"),
    Case("cache-root-other-owner", "cache", build(), setup=steps(mkdir("cache"),
                                                                  lambda tmp: os.chown(tmp / "cache", 65534, 65534)),
         must_name=("FLASHBUILD_CACHE_DIR",), needs="root", input="cache root owned by uid 65534"),
    Case("cache-root-world-writable-hint-quoted", "cache", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/my cache"},
         setup=mkdir("my cache", 0o777), must_name=("FLASHBUILD_CACHE_DIR",), check=pasteable("chmod", f"{TMP}/my cache"),
         input="cache root 'my cache' mode 777: its chmod hint, pasted"),
    Case("cache-entry-symlink-hint-quoted", "cache", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/my cache"},
         setup=symlinked_build, must_name=("symbolic link",), check=pasteable("rm", f"{TMP}/my cache"),
         input="cache 'my cache' whose entry is a symlink: its rm hint, pasted"),
    Case("cache-entry-symlink-build", "cache", build(), setup=symlinked_build, must_name=("symbolic link",),
         subprocess=True, input="the build's cache entry is a symlink to a build elsewhere"),
    Case("cache-entry-world-writable", "cache", build(), setup=chmod_build(0o777), must_name=("writ",),
         input="the build's cache entry has mode 777"),
    Case("cache-entry-other-owner", "cache", build(), setup=chown_build, must_name=("uid",), needs="root",
         input="the build's cache entry is owned by uid 65534"),
    Case("cache-list-symlink-entry", "cache", ("list",), setup=steps(cache_entry(where="elsewhere"),
                                                                     symlink(f"cache/{KEY}", f"{TMP}/elsewhere/{KEY}")),
         expect="ok", must_name=(KEY,), input="list: an entry that is a symlink to a build outside"),
    Case("cache-clean-all-symlink-entry", "cache", ("clean", "--all"),
         setup=steps(cache_entry(where="elsewhere"), symlink(f"cache/{KEY}", f"{TMP}/elsewhere/{KEY}")),
         expect="ok", check=exists(f"elsewhere/{KEY}/manifest.json", f"elsewhere/{KEY}/build.ninja"),
         subprocess=True, input="clean --all: an entry that is a symlink to a build outside"),
    Case("cache-clean-key-symlink-entry", "cache", ("clean", KEY),
         setup=steps(cache_entry(where="elsewhere"), symlink(f"cache/{KEY}", f"{TMP}/elsewhere/{KEY}")),
         must_name=(KEY,), check=exists(f"elsewhere/{KEY}/manifest.json"),
         input="clean KEY: KEY is a symlink to a build outside"),
    Case("cache-list-variants-int", "cache", ("list",), setup=cache_entry(manifest='{"variants": 5}'), expect="ok",
         must_name=(KEY,), input='list: manifest {"variants": 5}'),
    Case("cache-clean-all-variants-int", "cache", ("clean", "--all"), setup=cache_entry(manifest='{"variants": 5}'),
         expect="ok", check=lambda tmp, run: f"{KEY} was kept" if (tmp / "cache" / KEY).exists() else None,
         input='clean --all: manifest {"variants": 5}'),
    Case("cache-list-manifest-not-json", "cache", ("list",), setup=cache_entry(manifest="{oops"), expect="ok",
         must_name=(KEY,), input="list: manifest not JSON"),
    Case("cache-list-manifest-list", "cache", ("list", "--json"), setup=cache_entry(manifest="[1, 2]"), expect="ok",
         must_name=(KEY,), input="list --json: manifest is a list"),
    Case("cache-list-manifest-binary", "cache", ("list",), setup=cache_entry(manifest=b"\xff\xfe\x00"), expect="ok",
         must_name=(KEY,), input="list: manifest is binary"),
    Case("cache-list-manifest-extension-path", "cache", ("list", "--json"),
         setup=cache_entry(manifest='{"variants": [], "extension": "../../etc/passwd"}'), expect="ok",
         must_name=(KEY,), check=absent('"has_extension": true'), input='list: manifest "extension": "../../etc/passwd"'),
    Case("cache-list-manifest-dir", "cache", ("list",), setup=steps(cache_entry(manifest=None),
                                                                    mkdir(f"cache/{KEY}/manifest.json")),
         expect="ok", must_name=(KEY,), input="list: manifest.json is a directory"),
    Case("cache-list-file-entry", "cache", ("list",), setup=steps(mkdir("cache"), write("cache/notes.txt", "hi")),
         expect="ok", must_name=("notes.txt",), input="list: a plain file in the cache"),
    Case("cache-list-broken-symlink", "cache", ("list",), setup=steps(mkdir("cache"),
                                                                      symlink("cache/dangling", f"{TMP}/gone")),
         expect="ok", must_name=("dangling",), input="list: a dangling symlink in the cache"),
    Case("cache-list-symlink-loop", "cache", ("list",), setup=steps(mkdir("cache"), symlink("cache/loop", "loop")),
         expect="ok", must_name=("loop",), input="list: a symlink to itself"),
    Case("cache-clean-all-foreign", "cache", ("clean", "--all"),
         setup=steps(mkdir("cache/photos"), write("cache/photos/cat.jpg", "meow"), write("cache/notes.txt", "hi")),
         expect="ok", check=exists("cache/photos/cat.jpg", "cache/notes.txt"),
         input="clean --all: a foreign dir and file in the cache"),
    Case("cache-clean-all-symlink-in-build", "cache", ("clean", "--all"),
         setup=steps(cache_entry(), write("precious/data", "keep"), symlink(f"cache/{KEY}/obj", f"{TMP}/precious")),
         expect="ok", check=exists("precious/data"), input="clean --all: a build holding a symlink to a dir outside"),

    # ---- CI: matrix configs, cells, shards, link (docs/ci.md)
    Case("ci-matrix-missing-file", "config", ("matrix", f"{TMP}/nope.toml"), must_name=("nope.toml",)),
    Case("ci-matrix-not-toml", "config", ("matrix", f"{TMP}/m.toml"), setup=write("m.toml", "[matrix\n"),
         must_name=("m.toml",)),
    Case("ci-matrix-hdim-text", "config", ("matrix", f"{TMP}/m.toml"), setup=write("m.toml", '[matrix]\nhdim = "x"\n'),
         must_name=("m.toml", "matrix.hdim")),
    Case("ci-matrix-exclude-matches-nothing", "config", ("matrix", f"{TMP}/m.toml"),
         setup=write("m.toml", '[matrix]\nhdim = [64]\ndtype = ["fp16"]\narch = ["sm80"]\n'
                               '[[matrix.exclude]]\nhdim = 128\n'),
         must_name=("m.toml", "matrix.exclude[0]", "matches nothing")),
    Case("ci-matrix-shards-zero", "config", ("matrix", f"{TMP}/m.toml"),
         setup=write("m.toml", '[matrix]\nhdim = [64]\ndtype = ["fp16"]\narch = ["sm80"]\nshards = 0\n'),
         must_name=("m.toml", "shards")),
    Case("ci-matrix-flags-injection", "config", ("matrix", f"{TMP}/m.toml"),
         setup=write("m.toml", '[[cells]]\nname = "x"\nargs = ' + json.dumps(["--hdim", "64", "--nvcc-flag", payload()])
                     + "\n"),
         must_name=("m.toml",), input="m.toml: a cell whose args hold INJECTION", **PWNED),
    Case("ci-matrix-of-a-preset", "config", ("matrix", "ci-compile"), must_name=("ci-compile", "not a CI matrix")),
    Case("ci-cell-unknown", "cli", ("build", "--config", "ci", "--cell", "nope", "--dry-run"),
         must_name=("--cell nope", "smoke-sm80")),
    Case("ci-cell-without-matrix", "cli", ("build", "--config", "ci-compile", "--cell", "x", "--dry-run"),
         must_name=("--cell",)),
    Case("ci-cell-with-selection-flags", "cli", ("build", "--config", "ci", "--cell", "smoke-sm80", "--hdim", "128",
                                                 "--dry-run"), must_name=("--cell", "--hdim")),
    Case("ci-shard-text", "cli", (*dry(), "--shard", "x"), must_name=("--shard",)),
    Case("ci-shard-zero-index", "cli", (*dry(), "--shard", "0/4"), must_name=("--shard 0/4",)),
    Case("ci-shard-past-count", "cli", (*dry(), "--shard", "5/4"), must_name=("--shard 5/4",)),
    Case("ci-shard-negative", "cli", (*dry(), "--shard", "-1/4"), must_name=("--shard",)),
    Case("ci-shard-newline", "cli", (*dry(), "--shard", "1/4\n"), must_name=("--shard",)),
    Case("ci-link-missing-dir", "cli", ("link", f"{TMP}/nope"), must_name=("nope",)),
    Case("ci-link-no-manifest", "cli", ("link", f"{TMP}/art"), setup=mkdir("art"), must_name=("art", "manifest")),
    Case("ci-link-manifest-not-json", "cli", ("link", f"{TMP}/art"), setup=write("art/manifest.json", "{"),
         must_name=("art",)),
    Case("ci-link-manifest-list", "cli", ("link", f"{TMP}/art"), setup=write("art/manifest.json", "[]"),
         must_name=("art",)),

    # ---- bench result files (--results / --compare need no GPU)
    results_case("not-json", "fast", must_name=("r.json", "not JSON")),
    results_case("empty", "", must_name=("r.json", "empty")),
    results_case("binary", b"\x89PNG\r\n\x1a\n\x00\xff", must_name=("r.json", "not a text file")),
    results_case("list", "[]", must_name=("r.json", "not flashbuild bench results")),
    results_case("null", "null", must_name=("r.json",)),
    results_case("no-format", json.dumps({"results": [ROW]}), must_name=("r.json", "format")),
    results_case("other-format", results(format="pytest"), must_name=("r.json", "pytest")),
    results_case("no-results", json.dumps({"format": "flashbuild-bench"}), must_name=("r.json", "results")),
    results_case("results-object", results({}), must_name=("r.json", "results")),
    results_case("results-string", results("x"), must_name=("r.json", "results")),
    results_case("row-int", results([5]), must_name=("r.json", "result 0")),
    results_case("row-missing-ms", results(row(ms=DROP)), must_name=("r.json", "ms")),
    results_case("ms-fast", results(row(ms="fast")), must_name=("r.json", '"ms"', "fast"), code=2, subprocess=True),
    results_case("ms-negative", results(row(ms=-1)), must_name=("r.json", '"ms"')),
    results_case("ms-nan", results(row(ms=float("nan"))), must_name=("r.json", '"ms"')),
    results_case("ms-bool", results(row(ms=True)), must_name=("r.json", '"ms"')),
    results_case("ms-null", results(row(ms=None, tflops=None)), expect="ok", must_name=("n/a",)),
    results_case("tflops-text", results(row(tflops="x")), must_name=("r.json", '"tflops"')),
    results_case("hdim-text", results(row(hdim="64")), must_name=("r.json", '"hdim"')),
    results_case("hdim-zero", results(row(hdim=0)), must_name=("r.json", '"hdim"')),
    results_case("seqlen-text", results(row(seqlen="4k")), must_name=("r.json", '"seqlen"')),
    results_case("seqlen-null", results(row(seqlen=None)), must_name=("r.json", '"seqlen"')),
    results_case("batch-float", results(row(batch=1.5)), must_name=("r.json", '"batch"')),
    results_case("nheads-list", results(row(nheads=[32])), must_name=("r.json", '"nheads"')),
    results_case("causal-text", results(row(causal="yes")), must_name=("r.json", '"causal"')),
    results_case("backend-int", results(row(backend=5)), must_name=("r.json", '"backend"')),
    results_case("variant-null", results(row(variant=None)), must_name=("r.json", '"variant"')),
    results_case("direction-bad", results(row(direction="sideways")), must_name=("r.json", '"direction"')),
    results_case("reps-text", results(row(reps="x")), must_name=("r.json", '"reps"')),
    results_case("note-int", results(row(note=5)), must_name=("r.json", '"note"')),
    results_case("window-text", results(row(window_left="a")), must_name=("r.json", '"window_left"')),
    results_case("softcap-text", results(row(softcap="x")), must_name=("r.json", '"softcap"')),
    results_case("deep-nesting", "[" * 100000 + "]" * 100000, must_name=("r.json",)),
    results_case("extra-field", results(row(extra=1)), expect="ok", must_name=("fwd_hdim64_fp16_sm80",)),
    results_case("no-rows", results([]), expect="ok", must_name=("variant",)),
    results_case("old-without-window", results(row(window_left=DROP, window_right=DROP, softcap=DROP)), expect="ok",
                 must_name=("fwd_hdim64_fp16_sm80",)),
    results_case("compare-ms-fast", results(row(ms="fast")), flag="--compare", must_name=("--compare", "r.json", '"ms"')),
    results_case("compare-not-json", "{", flag="--compare", must_name=("--compare", "r.json", "not JSON")),
    results_case("compare-same", results(), flag="--compare", expect="ok", must_name=("regressions",)),
    results_case("compare-timing-escape", results(timing="\x1b[2J" + "x" * 300), flag="--compare", expect="ok",
                 must_name=("an unknown way", "regressions"),
                 check=lambda tmp, run: "the escape reached the terminal" if "\x1b" in run.stdout + run.stderr else None),
    results_case("compare-timing-list", results(timing=[1, 2]), flag="--compare", expect="ok",
                 must_name=("an unknown way ([1, 2])",)),
    Case("results-missing-file", "results", ("bench", "--results", f"{TMP}/nope.json"), must_name=("nope.json",),
         input="--results nope.json (no such file)"),
    Case("results-directory", "results", ("bench", "--results", TMP), must_name=("--results",), code=2,
         input="--results DIR"),
    Case("results-io-error", "results", ("bench", "--results", "/proc/self/mem"), must_name=("/proc/self/mem",),
         input="--results /proc/self/mem (read fails: EIO)"),
    Case("results-with-selection", "results", ("bench", "--results", f"{TMP}/good.json", "--hdim", "64"),
         setup=write("good.json", results()), must_name=("--results", "--hdim"), code=2,
         input="--results good.json --hdim 64"),
    bench_out("csv-under-a-file", "--csv", f"{TMP}/f/out.csv", setup=write("f", "x")),
    bench_out("json-under-a-file", "--json", f"{TMP}/f/out.json", setup=write("f", "x")),
    bench_out("plot-under-a-file", "--plot", f"{TMP}/f/out.png", setup=write("f", "x"), subprocess=True),
    bench_out("plot-unknown-format", "--plot", f"{TMP}/out.txt", must_name=("--plot", "out.txt")),
    bench_out("plot-no-suffix", "--plot", f"{TMP}/out", must_name=("--plot",)),
    bench_out("plot-a-directory", "--plot", TMP, code=2),
    bench_out("csv-a-directory", "--csv", TMP, code=2),
    bench_out("plot-read-only-dir", "--plot", f"{TMP}/ro/out.png", setup=mkdir("ro", 0o555), needs="non-root"),
    bench_out("csv-new-dirs", "--csv", f"{TMP}/new/sub/out.csv", expect="ok", must_name=("fwd_hdim64_fp16_sm80",),
              check=exists("new/sub/out.csv")),
    bench_out("plot-new-dirs", "--plot", f"{TMP}/new/out.png", expect="ok", must_name=("plot:",),
              check=exists("new/out.png")),
]


from hostile_round3 import ROUND3  # noqa: E402 - issue 48's cases, built from the helpers above

CASES += ROUND3

# ---------------------------------------------------------------- the tests


def _param(case: Case):
    marks = [pytest.mark.xfail(strict=False, reason=case.waiting)] if case.waiting else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_hostile_input(case: Case, tmp_path: Path):
    reason = skip_reason(case)
    if reason:
        pytest.skip(reason)
    verdict = run_case(case, tmp_path)
    detail = f"{case.shown_input()}\n-> {verdict.outcome}: {verdict.message}\nstdout: {verdict.run.stdout[-1500:]}\n" \
             f"stderr: {verdict.run.stderr[-1500:]}\n{verdict.run.traceback[-3000:]}"
    assert verdict.outcome == ("clear error" if case.expect == "error" else "rightly accepted"), detail


def test_the_case_list_covers_every_surface():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert len(CASES) >= 150
    by_surface = {s: sum(c.surface == s for c in CASES) for s in SURFACES}
    assert all(n >= 10 for n in by_surface.values()), by_surface
    assert all(c.expect in ("error", "ok") and c.surface in by_surface for c in CASES)
    assert all((c.call is None) == (c.surface != "api") for c in CASES)


def test_flashbuild_build_stays_the_function_once_its_stage_is_imported():
    """The build stage is the subpackage flashbuild.pipeline, so no subpackage shares the function's
    name: importing the stage (as build() itself does) leaves flashbuild.build the function (when the
    stage was flashbuild/build/, a second call raised 'module' object is not callable)."""
    probe = subprocess.run([sys.executable, "-c", "import flashbuild, flashbuild.pipeline.builder, flashbuild.pipeline.cache; "
                            "from flashbuild.pipeline import plan; print(callable(flashbuild.build))"],
                           capture_output=True, text=True, cwd=REPO)
    assert probe.stdout.strip() == "True", probe.stderr
