"""FLASHBUILD_SPLITKV_DEAL is no longer read. It picked issue 45's stream-K deal of the Hopper split-KV (`streamk`),
which lost to the splits in run 14 and was taken out of main (benchmarks/decode/README.md, "A stream-K deal", names
the last commit that has it). Like the repo's other removed study switches, the variable is ignored, not refused: every
value it took computed the same attention, and refusing it would put back the getenv on every decoding call that the
removal drops. Checked on an sm90 GPU (skipped elsewhere) for both tiles (FLASHBUILD_SPLITKV_TILE=decode and rows64):
with the variable set to its old values, a value it used to refuse, or unset, a call with num_splits=0 (where the deal
applied) passes the fp32 reference on poisoned memory (tests/gpu/test_kvcache_decode_tile_gpu.py's `step`) and gives
the same bits. The CPU side (no source reads it): tests/test_splitkv_deal_walk.py.

Run: PYTHONPATH=$PWD python3 -m pytest -q tests/gpu/test_splitkv_streamk_gpu.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                                reason="the deal was the Hopper split-KV's: needs an sm90 GPU")

import flashbuild  # noqa: E402

from test_kvcache_decode_tile_gpu import TILES, step  # noqa: E402
from test_kvcache_gpu import SELECTION  # noqa: E402

DEAL_VAR = "FLASHBUILD_SPLITKV_DEAL"


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_removed_deal_variable_changes_nothing(m, monkeypatch, tile, head_dim):
    # 16 tiles of 64 key blocks at hdim 128 (32 of 32 at 64): the stream-K deal would have sliced them otherwise.
    monkeypatch.delenv(DEAL_VAR, raising=False)
    unset = step(m, monkeypatch, tile, batch=2, head_dim=head_dim, capacity=4096, lens=[4096, 3001], seed=7)
    for value in ("streamk", "splits", "auto", "stream-k", ""):
        monkeypatch.setenv(DEAL_VAR, value)
        out = step(m, monkeypatch, tile, batch=2, head_dim=head_dim, capacity=4096, lens=[4096, 3001], seed=7)
        assert torch.equal(out, unset), f"{DEAL_VAR}={value!r} changed the output"
