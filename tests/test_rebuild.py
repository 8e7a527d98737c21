"""The edit -> rebuild -> check cycle, counted (not timed), with real nvcc on the synthetic kernels:
a no-op rebuild compiles nothing, and touching one kernel header recompiles exactly the TUs whose
dependency list (the depfile ninja recorded) names it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from flashbuild.pipeline import builder
from flashbuild import env
from helpers import FAKE_BWD_DETAIL, make_root, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

SELECTION = dict(hdim=64, dtype="fp16", arch="sm80", direction="fwd,bwd", causal="both", features=[],
                 compile_only=True)
FWD_TUS = {"fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_causal_sm80"}
BWD_TUS = {"bwd_hdim64_fp16_sm80", "bwd_hdim64_fp16_causal_sm80"}


def build():
    return builder.build(*builder.parse_request(**SELECTION))


def recorded_deps(build_dir: Path) -> dict[str, set[str]]:
    """variant -> the headers its depfile listed (ninja keeps them in .ninja_deps: `ninja -t deps`)."""
    out = subprocess.run([str(env.find_ninja()), "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True,
                         check=True).stdout
    deps: dict[str, set[str]] = {}
    target = None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            target = Path(line.split(":", 1)[0]).stem
            deps[target] = set()
        elif line.strip() and target:
            deps[target].add(str(Path(line.strip()).resolve()))
    return deps


def touch(path: Path) -> None:
    """Set the mtime to now, which is after every object's (not in the future: that would stay dirty)."""
    time.sleep(0.05)
    os.utime(path)


@pytest.fixture
def built(tmp_path, monkeypatch):
    root = make_root(tmp_path)
    monkeypatch.setenv("FLASHBUILD_ROOT", str(root))
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(tmp_path / "cache"))
    first = build()
    assert set(first.timings) == FWD_TUS | BWD_TUS
    return root, first.build_dir


def test_a_noop_rebuild_recompiles_nothing(built):
    assert build().timings == {}
    assert build().timings == {}


@pytest.mark.parametrize("header, expected", [
    (FAKE_BWD_DETAIL, BWD_TUS),           # included by the bwd launch header only
    ("ampere/fwd_launch.h", FWD_TUS),
    ("ampere/bwd_launch.h", BWD_TUS),
    ("common/params.h", FWD_TUS | BWD_TUS),  # every TU includes it
])
def test_touching_one_header_recompiles_exactly_the_tus_that_include_it(built, header, expected):
    root, build_dir = built
    path = root / "kernels" / header
    including = {tu for tu, headers in recorded_deps(build_dir).items() if str(path.resolve()) in headers}
    assert including == expected  # what the depfiles say ...
    touch(path)
    recompiled = set(build().timings)
    assert len(recompiled) == len(including) and recompiled == including  # ... is what recompiles
    assert build().timings == {}  # and then it is up to date again


def test_a_header_no_tu_includes_recompiles_nothing(built):
    root, _ = built
    (root / "kernels" / "ampere" / "unused.h").write_text("#pragma once\n")
    touch(root / "kernels" / "ampere" / "unused.h")
    assert build().timings == {}
