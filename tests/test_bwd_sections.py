"""The causal Hopper backward's grid in sections of heads (kernels/hopper/bwd_sections.h) walked on the CPU: nvcc
compiles tests/host/bwd_sections.cu for the host (no device code runs) and the test runs it. Over 1-70 heads,
sections of 0-16 heads, 1-129 key blocks and 1 or 3 sequences, the launch's extents and the kernel's own index
reading give every (key block, head, batch) to one CTA, and the CTAs start section by section, key block 0 of each
head first. A CTA taken twice or never on the GPU is a dK / dV written twice or never, which is why it is checked
here for head counts the GPU tests do not cover."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import REPO, requires_nvcc, run_host_walk

pytestmark = [requires_nvcc, pytest.mark.compile]

SOURCE = REPO / "tests" / "host" / "bwd_sections.cu"


def test_sections_give_every_cta_once_longest_first(tmp_path: Path):
    summary = run_host_walk(tmp_path, SOURCE, timeout=300)
    assert summary.endswith(" 0 fail"), summary
