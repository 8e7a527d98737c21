"""Fixtures: a temporary cache dir, a machine without GPU, a FLASHBUILD_ROOT with a synthetic kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild import env
from helpers import make_root


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
