"""The deterministic backward's dQ order (kernels/common/bwd_dq_order.h), checked on the CPU: nvcc
compiles tests/host/bwd_dq_order.cu for the host (no device code runs) and the test runs it. For 174k
(seqlen_q, seqlen_k, tile, mask, window) cases, seqlens 1 to 4097 both ways, it walks the kernel's own
loop bounds and asserts that the key blocks adding into each query block are contiguous, that the
turns are their ranks in blockIdx.x order (0 .. count-1, every visit counted), that every query block
has a counter, and that CTAs dispatched in blockIdx.x order onto 1, 2 or 5 SMs never wait forever.
A wrong turn on the GPU is a hang, not a wrong number, which is why it is checked here exhaustively."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import REPO, requires_nvcc, run_host_program

pytestmark = [requires_nvcc, pytest.mark.compile]

SOURCE = REPO / "tests" / "host" / "bwd_dq_order.cu"


def test_dq_turns_follow_the_loop_bounds_and_cannot_deadlock(tmp_path: Path):
    done = run_host_program(tmp_path, SOURCE, timeout=300)
    print(done.stdout.splitlines()[-1] if done.stdout else done.stderr)
    assert done.returncode == 0 and "FAIL" not in done.stdout, done.stdout[-3000:]
    assert " 0 failures" in done.stdout and "checked " in done.stdout
