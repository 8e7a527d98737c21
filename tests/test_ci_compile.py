"""Our own CI (.ci/run, 2 cores, no GPU) compile-checks both kernel families through the matrix
machinery: the smoke cells of configs/ci.toml, one real forward TU each (sm_80: the Ampere path;
sm_90a: the Hopper family), built with `flashbuild build --config configs/ci.toml --cell NAME
--compile-only` exactly as a CI job would. About 35 s (sm_80) and 45 s (sm_90a) on that machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]


@pytest.mark.parametrize("cell, arch", [("smoke-sm80", b"-arch sm_80 "), ("smoke-sm90a", b"-arch sm_90a ")])
def test_a_smoke_cell_compiles_for_real(tmp_path, cell, arch):
    environ = {k: v for k, v in os.environ.items() if k not in ("FLASHBUILD_ROOT", "FLASHBUILD_LAUNCHER")}
    environ["FLASHBUILD_CACHE_DIR"] = str(tmp_path / "cache")
    result = subprocess.run([sys.executable, "-m", "flashbuild", "build", "--config", "configs/ci.toml", "--cell", cell,
                             "--compile-only", "--jobs", "1"], capture_output=True, text=True, env=environ, cwd=REPO,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = {"smoke-sm80": ["fwd_hdim64_fp16_sm80"],  # sm_90a: the Hopper launch and kernel TUs
                "smoke-sm90a": ["fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_kernel"]}[cell]
    assert f"compiled {len(expected)} kernel object{'s' if len(expected) > 1 else ''} in" in result.stdout
    (build_dir,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    objs = sorted((build_dir / "obj").glob("*.o"))
    assert [obj.stem for obj in objs] == expected
    for obj in objs:
        assert arch in obj.read_bytes()  # ptxas options embedded with the cubin: the arch it was built for
