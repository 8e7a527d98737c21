"""The Hopper split-KV's stream-K deal (kernels/common/splitkv_streamk.h, FLASHBUILD_SPLITKV_DEAL=streamk: the (tile,
key block) items dealt evenly over the persistent CTAs, a tile's pieces merged in the kernel with its own piece count)
on an sm90 GPU (skipped elsewhere), for both tiles (FLASHBUILD_SPLITKV_TILE=decode and rows64). Each call against
kvcache_ref in fp32 by the correctness rule (docs/correctness.md) on poisoned memory, through the decode tile tests'
`step` (tests/gpu/test_kvcache_decode_tile_gpu.py): an output the kernel did not write reads as NaN, every cache
position a call must not read holds NaN. The deal applies with num_splits=0 (auto); a forced count keeps the splits.
Cases: batch 1, 8, 64 (issue 45's rows: pieces that cross tiles, tiles of one piece written directly), cache lengths
off the block, one key, an empty row (pieces with no key: -inf LSE, nothing in the merge), GQA groups, causal query
rows (blocks past a row's limit: empty pieces), a window and softcap, a paged cache, appended keys (not stream-K: the
binding keeps the splits where the kernel does not merge), fp16 and bf16.

Run: PYTHONPATH=$PWD python3 -m pytest -q tests/gpu/test_splitkv_streamk_gpu.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                                reason="the stream-K deal is the Hopper split-KV's: needs an sm90 GPU")

import flashbuild  # noqa: E402

from test_kvcache_decode_tile_gpu import TILES, step  # noqa: E402
from test_kvcache_gpu import SELECTION  # noqa: E402

DEAL_VAR = "FLASHBUILD_SPLITKV_DEAL"


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


@pytest.fixture(scope="module")
def m_bf16():
    return flashbuild.load(hdim="64,128", dtype="bf16", arch="native", direction="splitkv", causal="off", features=[])


@pytest.fixture
def streamk(monkeypatch):
    monkeypatch.setenv(DEAL_VAR, "streamk")
    return monkeypatch


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("batch", [1, 8, 64])
def test_issue_rows_off_the_block(m, streamk, tile, head_dim, batch):
    # 8 KV heads, groups of 4: 8 x batch tiles. Lengths: the capacity, odd ones, 1 key, an empty row.
    lens = [(4096 - 37 * b) if b % 5 else (1, 0, 4096, 2049, 129)[b // 5 % 5] for b in range(batch)]
    step(m, streamk, tile, batch=batch, nheads=32, nheads_k=8, head_dim=head_dim, capacity=4096, lens=lens,
         seed=batch + head_dim)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_single_key_empty_rows_and_forced_splits(m, streamk, tile, head_dim):
    for num_splits in (0, 1, 3):  # forced counts keep the splits deal
        step(m, streamk, tile, batch=5, head_dim=head_dim, lens=[1, 0, 129, 1023, 517], num_splits=num_splits,
             seed=head_dim + num_splits)
    step(m, streamk, tile, batch=1, nheads=8, nheads_k=8, head_dim=head_dim, capacity=64, lens=[1], seed=4)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("group", [1, 3, 8, 9, 32])
def test_gqa_groups(m, streamk, tile, group):
    for head_dim in (64, 128):
        step(m, streamk, tile, batch=2, nheads=2 * group, nheads_k=2, head_dim=head_dim, capacity=8192,
             lens=[8191, 300], seed=group * 3 + head_dim)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("seqlen_q", [2, 5, 8, 17])
def test_causal_query_rows(m, streamk, tile, seqlen_q):
    for head_dim in (64, 128):
        step(m, streamk, tile, batch=3, seqlen_q=seqlen_q, nheads=8, nheads_k=8, head_dim=head_dim, capacity=2048,
             lens=[2000, 40, 5], causal=True, seed=seqlen_q + head_dim)


@pytest.mark.parametrize("tile", TILES)
def test_window_softcap_and_appended_keys(m, streamk, tile):
    step(m, streamk, tile, batch=2, seqlen_q=4, nheads=8, nheads_k=2, head_dim=64, capacity=2048, lens=[1800, 33],
         causal=True, window_size=(100, 0), softcap=30.0, seed=1)
    step(m, streamk, tile, batch=2, seqlen_q=1, nheads=16, nheads_k=2, head_dim=128, lens=[500, 2],
         window_size=(300, 0), seed=2)
    step(m, streamk, tile, batch=3, seqlen_q=3, nheads=8, nheads_k=8, head_dim=128, lens=[0, 517, 1000],
         seqlen_new=3, causal=True, seed=3)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_paged_cache(m, streamk, tile, head_dim):
    for batch in (3, 8):
        step(m, streamk, tile, batch=batch, head_dim=head_dim, capacity=4096,
             lens=[4096, 700, 1, 3000, 2049, 0, 4095, 129][:batch], page_size=256, seed=head_dim + batch)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_bf16(m_bf16, streamk, tile, head_dim):
    for batch in (1, 8):
        step(m_bf16, streamk, tile, batch=batch, head_dim=head_dim, capacity=4096,
             lens=[4000, 129, 1, 4096, 2000, 3333, 0, 17][:batch], dtype=torch.bfloat16, seed=head_dim + batch)


@pytest.mark.parametrize("tile", TILES)
def test_the_switch_changes_the_deal_and_refuses_a_bad_value(m, monkeypatch, tile):
    # The deals slice the keys differently (16 tiles of 64 blocks: 8 splits of 8, or ~4 blocks a CTA), so the merged
    # fp16 outputs differ somewhere; both pass the rule.
    outs = []
    for deal in ("splits", "streamk"):
        monkeypatch.setenv(DEAL_VAR, deal)
        outs.append(step(m, monkeypatch, tile, batch=2, head_dim=128, capacity=4096, lens=[4096, 3001], seed=7))
    assert not torch.equal(outs[0], outs[1]), "FLASHBUILD_SPLITKV_DEAL picked the same deal for splits and streamk"
    monkeypatch.setenv(DEAL_VAR, "stream-k")
    q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float16)
    cache = torch.randn(1, 256, 2, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="FLASHBUILD_SPLITKV_DEAL='stream-k' is not a split-KV deal: set streamk"):
        m.flash_attn_with_kvcache(q, cache, cache)
