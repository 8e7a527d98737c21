"""Fixtures: a temporary cache dir, a machine without GPU, a FLASHBUILD_ROOT with a synthetic kernel, and
the real forward kernel compiled once per session. And the test tiers: the tests listed in slow_tests.txt
and every GPU test are marked slow, so `pytest -m "not compile and not slow"` is the fast tier."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from flashbuild import env
from helpers import REPO, make_root, slow_tests


def pytest_collection_modifyitems(config, items):
    slow = slow_tests()
    for item in items:
        path = Path(str(item.fspath))
        function = f"tests/{path.relative_to(Path(__file__).parent).as_posix()}::{item.originalname}"
        if path.parent.name == "gpu":
            item.add_marker(pytest.mark.gpu)   # each builds an extension first, on a device (skipped without one)
            item.add_marker(pytest.mark.slow)
        if path.parent.name == "fuzz":
            item.add_marker(pytest.mark.slow)  # the Hypothesis suite: ~40 s on 2 cores, the full tier runs it
        elif function in slow:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(path))
    return path


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(env, "gpu_compute_caps", lambda: [])


@pytest.fixture
def fake_root(tmp_path, monkeypatch) -> Path:
    root = make_root(tmp_path)
    monkeypatch.setenv("FLASHBUILD_ROOT", str(root))
    return root


@dataclass(frozen=True)
class RealBuild:
    cache: Path
    build_dir: Path
    process: subprocess.CompletedProcess
    seconds: float


@pytest.fixture(scope="session")
def real_fwd_build(tmp_path_factory) -> RealBuild:
    """The repo's own forward kernel compiled for real (preset ci-compile: hdim 64, fp16, not causal,
    sm_80 and sm_90a; --compile-only, so no GPU or CUDA torch), once per session: the compile test
    and the inspect tests share it, because each such TU takes about a minute on 2 cores."""
    if env.find_nvcc() is None:
        pytest.skip("nvcc not found (CUDA_HOME, PATH, /usr/local/cuda, nvidia-cuda-nvcc wheel)")
    cache = tmp_path_factory.mktemp("real-fwd") / "cache"
    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}
    environ.pop("FLASHBUILD_ROOT", None)
    started = time.monotonic()
    process = subprocess.run([sys.executable, "-m", "flashbuild", "--config", "ci-compile", "--compile-only"],
                             capture_output=True, text=True, env=environ, cwd=REPO)
    build_dirs = [p for p in cache.iterdir() if p.is_dir()] if cache.is_dir() else []
    return RealBuild(cache, build_dirs[0] if build_dirs else cache, process, time.monotonic() - started)
