"""The Hopper split-KV's persistent scheduler (kernels/hopper/tile_scheduler.h, SplitTileScheduler) walked on the CPU:
nvcc compiles tests/host/splitkv_deal_walk.cu for the host (no device code runs) and the test runs it. Over grids of
1-264 slots, 1-64 sequences, 1-8 heads, 1-4 query blocks and 1-32 splits, the kernels' own loop (first_tile, valid,
next_tile, decode) deals every (tile, split) once, each with the call's split count, and every CTA of the grid a tile.
A tile dealt twice or never on the GPU is a merge that never runs or reads a slot no one wrote, which is why it is
checked here. (The stream-K deal this also walked was taken out of main after issue 45's run 14:
benchmarks/decode/README.md, "A stream-K deal".)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import REPO, requires_nvcc, run_host_walk

SOURCE = REPO / "tests" / "host" / "splitkv_deal_walk.cu"
# The stream-K deal's switch and names, which no code reads or defines since it was taken out: a decoding call pays no
# getenv for it, and FLASHBUILD_SPLITKV_DEAL set by a user is ignored (docs/serving.md says why).
REMOVED = re.compile(r"SPLITKV_DEAL|streamk|stream_k|StreamK|split_deal|SplitKVDeal")


def test_the_removed_deal_is_read_and_defined_nowhere():
    roots = [REPO / "kernels", REPO / "flashbuild", REPO / "templates"]
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
             for root in roots for path in sorted(root.rglob("*")) if path.is_file() and path.suffix != ".pyc"
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if REMOVED.search(line)]
    assert not found, "the removed stream-K deal is still named:\n" + "\n".join(found[:20])
    assert not (REPO / "kernels" / "common" / "splitkv_streamk.h").exists()


@requires_nvcc
@pytest.mark.compile
def test_splits_deal_covers_every_tile_once(tmp_path: Path):
    summary = run_host_walk(tmp_path, SOURCE)
    assert summary.endswith(" 0 fail"), summary
