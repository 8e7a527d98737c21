"""The Hopper backward's walk over a CTA's query blocks (kernels/hopper/bwd_walk.h: from its own place in hdim 192's
non-causal kernels) on the CPU: nvcc compiles tests/host/bwd_walk.cu for the host (no device code runs) and the test
runs it. Over 0-70 query blocks from block 0 or 3 and 1-1024 key blocks, and at 2^25 blocks, every key block's walk
takes each query block once, starts inside the range and in key-block order, and iter_of inverts it. A block taken
twice or never on the GPU is a dQ added twice or never, which is why it is checked here for sizes the GPU tests do
not reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import REPO, requires_nvcc, run_host_walk

pytestmark = [requires_nvcc, pytest.mark.compile]

SOURCE = REPO / "tests" / "host" / "bwd_walk.cu"


def test_every_walk_takes_each_query_block_once(tmp_path: Path):
    summary = run_host_walk(tmp_path, SOURCE, timeout=300)
    assert summary.endswith(" 0 fail"), summary
