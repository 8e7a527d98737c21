"""Values that reach nvcc or build.ninja and no escaping makes safe there are refused, naming them.

nvcc runs its own steps (gcc -E, cudafe++, cicc, ...) through a shell, wrapping most arguments in
double quotes and -Xcompiler's value in none (`nvcc --dryrun` shows it; measured with nvcc 13.0): so
`$(...)`, a backtick, `"` or `\\` in a path or flag, or `;` in an -Xcompiler value, is run by that
shell, whatever build.ninja quoted. And ninja cannot escape `|` in a build line's path. These tests
run the CLI in a child process over the stand-in nvcc (no CUDA needed): each value must be one
clear error (exit 2), never a build, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.pipeline import graph
from flashbuild.errors import SelectionError
from helpers import make_fake_cuda

SLICE = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--no-local", "--no-softcap",
         "--compile-only"]


@pytest.fixture
def fake_env(tmp_path, fake_root) -> dict:
    home = make_fake_cuda(tmp_path)
    return {**os.environ, "CUDA_HOME": str(home), "FLASHBUILD_ROOT": str(fake_root),
            "FLASHBUILD_CACHE_DIR": str(tmp_path / "cache"), "FAKE_NVCC_LOG": str(tmp_path / "nvcc.log")}


def run(environ: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flashbuild", *SLICE, *args], capture_output=True, text=True,
                          env=environ, timeout=120)


def assert_refused(result: subprocess.CompletedProcess, tmp_path: Path, *names: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "flashbuild: error:" in result.stderr, result.stderr
    for name in names:
        assert name in result.stderr, result.stderr
    assert not (tmp_path / "nvcc.log").exists(), "nvcc ran"
    assert not list(tmp_path.rglob("build.ninja"))


@pytest.mark.parametrize("flag", ["-DX=$(touch pwned)", "-DX=`touch pwned`", '-DX=" ; touch pwned ; "',
                                  "-DX=\\", "-Xcompiler=-DZ=1;touch pwned", "--compiler-options=-O2 -DZ"])
def test_an_nvcc_flag_nvccs_own_shell_would_run_is_refused(flag, fake_env, tmp_path):
    result = run(fake_env, "--nvcc-flag", flag)
    assert_refused(result, tmp_path, "--nvcc-flag")


def test_an_xcompiler_value_as_the_next_flag_is_checked_too(fake_env, tmp_path):
    result = run(fake_env, "--nvcc-flag=-Xcompiler", "--nvcc-flag=-DZ=1;touch pwned")
    assert_refused(result, tmp_path, "--nvcc-flag", "-Xcompiler")


@pytest.mark.parametrize("name", ["b$(touch pwned)", "b`touch pwned`", 'b"q', "b\\q", "a|b", "a #b"])
def test_a_build_dir_nvcc_or_ninja_cannot_take_is_refused(name, fake_env, tmp_path):
    result = run(fake_env, "--build-dir", str(tmp_path / name))
    assert_refused(result, tmp_path, "--build-dir")


@pytest.mark.parametrize("name", ["c$(touch pwned)", "c`x`", "c|d"])
def test_a_cache_dir_nvcc_or_ninja_cannot_take_is_refused(name, fake_env, tmp_path):
    result = run({**fake_env, "FLASHBUILD_CACHE_DIR": str(tmp_path / name)})
    assert_refused(result, tmp_path, "FLASHBUILD_CACHE_DIR")


@pytest.mark.parametrize("name", ["ro\not", "r`touch pwned`", "r$(touch pwned)"])
def test_a_kernel_root_nvcc_or_ninja_cannot_take_is_one_clear_error(name, fake_env, fake_root, tmp_path):
    """FLASHBUILD_ROOT reaches build.ninja as include dirs: refused, naming the value, not a traceback."""
    odd = tmp_path / name
    fake_root.rename(odd)
    result = run({**fake_env, "FLASHBUILD_ROOT": str(odd)})
    assert_refused(result, tmp_path, "FLASHBUILD_ROOT")


def test_a_cuda_home_with_a_newline_is_one_clear_error(fake_env, tmp_path):
    odd = tmp_path / "cu\nda"
    Path(fake_env["CUDA_HOME"]).rename(odd)
    result = run({**fake_env, "CUDA_HOME": str(odd)})
    assert_refused(result, tmp_path, "CUDA_HOME")


def test_spaces_quotes_colons_and_hashes_still_reach_nvcc_literally(fake_env, tmp_path):
    flag = "-DX='q' a b #c"  # a build dir with `#` is refused (nvcc's depfiles leave it unescaped); a flag may hold one
    build_dir = tmp_path / "b x:y 'q'"
    result = run({**fake_env, "FLASHBUILD_CACHE_DIR": str(tmp_path / "c che")}, "--nvcc-flag", flag,
                 "--build-dir", str(build_dir), "--nvcc-flag=-Xcompiler=-fno-strict-aliasing,-O2")
    assert result.returncode == 0, result.stderr
    calls = [json.loads(line) for line in (tmp_path / "nvcc.log").read_text().splitlines()]
    # A kernel TU's second step embeds its fatbin (graph.py: no user flag belongs there); every compile gets them.
    calls = [call for call in calls if "-DFLASHBUILD_EMBED_FATBIN" not in call]
    assert calls and all(flag in call for call in calls)
    assert all(f"{build_dir}/generated" in " ".join(call) for call in calls)


def test_the_graph_refuses_what_got_past_the_callers():
    for value in ("/a|b/x.cu", "/a$(x)/x.cu", "/a`x`/x.cu"):
        with pytest.raises(graph.UnsafeValueError):
            graph.path(value, nvcc=True)
    with pytest.raises(graph.UnsafeValueError):
        graph.path("/a|b")
    assert graph.path("/a b:c/$x") == "/a$ b$:c/$$x"  # a ninja-only path may hold `$`


# ---------------------------------------------------------------- torch's spec is written into the cache too

def _plan_and_stub(monkeypatch, fake_root, build_dir=None):
    from flashbuild.pipeline import plan as plan_module, toolchain

    spec = toolchain.TorchSpec((Path("/inc"),), ("-DA=1",), "c++17", Path("/lib"), False)
    monkeypatch.setattr(toolchain, "_import_torch_spec", lambda plan: spec)
    selection, options = plan_module.parse_request(hdim=64, dtype="fp16", arch="sm90", direction="fwd",
                                                   no_local=True, no_softcap=True, build_dir=build_dir)
    return plan_module.make_plan(selection, options), toolchain


def test_torch_spec_makes_no_cache_dir_others_can_read(cache, fake_root, monkeypatch):
    """torch_spec.json is written before the build dir is prepared (an upstream tree's toolchain needs
    it): the cache root and entry it makes are 0700 all the same."""
    plan, toolchain = _plan_and_stub(monkeypatch, fake_root)
    toolchain.torch_spec(plan)
    for path in (cache, plan.build_dir):
        assert path.stat().st_mode & 0o077 == 0, f"{path} is {path.stat().st_mode & 0o777:o}"


def test_torch_spec_never_writes_through_a_symlinked_cache_entry(cache, fake_root, monkeypatch, tmp_path):
    plan, toolchain = _plan_and_stub(monkeypatch, fake_root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache.mkdir(mode=0o700)
    plan.build_dir.symlink_to(elsewhere)
    with pytest.raises(SelectionError, match="symbolic link"):
        toolchain.torch_spec(plan)
    assert not list(elsewhere.iterdir())


# ---------------------------------------------------------------- a damaged build dir is a clear error

def _damage(kind: str, build_dir: Path) -> None:
    import shutil

    if kind == "ninja-log-bytes":
        (build_dir / ".ninja_log").write_bytes(bytes(range(128, 256)) * 3)
        return
    name = {"build.ninja-dir": "build.ninja", "build.log-dir": "build.log", "lock-dir": ".lock",
            "generated-file": "generated", "obj-file": "obj",
            "cu-dir": next((build_dir / "generated").glob("*.cu")).relative_to(build_dir)}[kind]
    target = build_dir / name
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    if kind.endswith("-file"):
        target.write_text("x")
    else:
        target.mkdir()


@pytest.mark.parametrize("kind", ["ninja-log-bytes", "build.ninja-dir", "build.log-dir", "lock-dir", "generated-file",
                                  "obj-file", "cu-dir"])
def test_a_damaged_build_dir_is_a_clear_error_or_a_rebuild(kind, fake_env, tmp_path):
    first = run(fake_env)
    assert first.returncode == 0, first.stderr
    build_dir = next((tmp_path / "cache").iterdir())
    _damage(kind, build_dir)
    result = run(fake_env)
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode != 0:
        assert result.returncode == 1 and "flashbuild: error:" in result.stderr, result.stderr
        assert build_dir.name in result.stderr and "flashbuild clean" in result.stderr, result.stderr


def test_an_entry_another_build_removes_while_we_look_is_skipped_not_an_error(tmp_path, monkeypatch):
    """Two processes loading one key (pytest workers, ranks): the other one renames and removes its
    temporaries while this one checks the build dir (seen on a 4-GPU host: 'cache entry ...: cannot be
    read (No such file or directory)'). A vanished entry is skipped; a planted symlink is still refused."""
    from flashbuild.pipeline import cache

    build_dir = tmp_path / "entry"
    (build_dir / "obj").mkdir(parents=True)
    (build_dir / "obj" / "a.o").write_text("")
    (build_dir / "gone.tmp").write_text("")
    (build_dir / "obj" / "gone-too.tmp").write_text("")
    real_scandir = os.scandir

    class Vanishing:
        def __init__(self, entry):
            self.entry, self.path, self.name = entry, entry.path, entry.name

        def stat(self, follow_symlinks=True):
            if self.name.endswith(".tmp"):
                raise FileNotFoundError(2, "No such file or directory", self.path)
            return self.entry.stat(follow_symlinks=follow_symlinks)

    monkeypatch.setattr(cache.os, "scandir", lambda d: [Vanishing(e) for e in real_scandir(d)])
    cache.check_contents(build_dir, "cache entry x", fix="`flashbuild clean x`")  # no error

    (build_dir / "obj" / "out").symlink_to(tmp_path)
    with pytest.raises(SelectionError, match="symbolic link"):
        cache.check_contents(build_dir, "cache entry x", fix="`flashbuild clean x`")
