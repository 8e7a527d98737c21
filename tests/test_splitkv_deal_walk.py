"""The Hopper split-KV's persistent scheduler (kernels/hopper/tile_scheduler.h, SplitTileScheduler) walked on the CPU:
nvcc compiles tests/host/splitkv_deal_walk.cu for the host (no device code runs) and the test runs it. For both deals
(the splits; the stream-K deal of kernels/common/splitkv_streamk.h) over grids of 1-264 slots, 1-64 sequences, 1-8
heads, 1-4 query blocks and 1-16384 key blocks, the kernels' own loop (first_tile, valid, next_tile, decode) deals
every tile's work once: every (tile, split) once; every tile's key blocks once in pieces indexed 0 .. count - 1 in key
order, within the partial slots the binding allocates (and make refuses fewer). A wrong piece index or count on the
GPU is a merge that never runs or reads a slot no one wrote, which is why it is checked here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flashbuild import env
from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

SOURCE = REPO / "tests" / "host" / "splitkv_deal_walk.cu"


def test_both_deals_cover_every_tile_once_in_indexed_pieces(tmp_path: Path):
    cutlass = env.cutlass_include_dir()
    if cutlass is None:
        pytest.skip("the CUTLASS headers (nvidia-cutlass wheel) are not installed")
    binary = tmp_path / "splitkv_deal_walk"
    compiled = subprocess.run([str(env.find_nvcc().path), "-std=c++17", "-O2", "--expt-relaxed-constexpr",
                               f"-I{REPO / 'kernels'}", f"-I{cutlass}", str(SOURCE), "-o", str(binary)],
                              capture_output=True, text=True, timeout=600)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.rstrip().endswith(" 0 fail"), (done.stdout[-3000:],
                                                                               done.stderr[-3000:])
