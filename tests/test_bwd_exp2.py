"""The Hopper backward's polynomial exp2 (kernels/hopper/bwd_exp2.h: BwdTraits::kExpPoly computes a share of
P^T's exponentials on the FMA pipe), checked on the CPU: nvcc compiles tests/host/bwd_exp2.cu for the host
and the test runs it. Relative error at most 3e-6 on [-125.5, 4] (a 2^-12 grid and its neighbours), and
masked scores (-inf) and anything below -125.5 give a value in [0, 2^-125], which rounds to 0 in the 16-bit
P^T and dS^T as MUFU's flush-to-zero exp2 does. The GPU checks of benchmarks/hopper_bwd_fa3/ check the
kernel's gradients with it in use."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flashbuild import env
from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

SOURCE = REPO / "tests" / "host" / "bwd_exp2.cu"


def test_exp2_poly_matches_exp2_and_flushes_masked_scores(tmp_path: Path):
    binary = tmp_path / "bwd_exp2"
    compiled = subprocess.run([str(env.find_nvcc().path), "-std=c++17", "-O2", f"-I{REPO / 'kernels'}",
                               str(SOURCE), "-o", str(binary)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    print(done.stdout.splitlines()[-1] if done.stdout else done.stderr)
    assert done.returncode == 0 and "FAIL" not in done.stdout, done.stdout[-3000:]
    assert " 0 failures" in done.stdout and "checked " in done.stdout
