"""The Hopper split-KV's decode tile (kernels/hopper/splitkv_decode_kernel.h: keys in wgmma's M, at most 16 query rows
in N) on an sm90 GPU (skipped elsewhere), beside the 64-row tile it stands in for, each picked per call with
FLASHBUILD_SPLITKV_TILE (decode / rows64). Both against kvcache_ref in fp32 by the correctness rule
(docs/correctness.md), on poisoned memory (an output the kernel did not write reads as NaN; every cache position a
call must not read holds NaN): cache lengths that are not a multiple of the key block, a single key, an empty row,
forced splits (one, several, more than the blocks), a paged cache, GQA groups of 1 to 32 query heads (up to the
tile's rows, kDecodeTileRows: 8, or 16 in a build with -DFLASHBUILD_HOPPER_DECODE_ROWS=16, the decode tile's; past
them the 64-row tile's, with either setting), several causal query rows, a window and softcap, appended keys, fp16
and bf16.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                                reason="the decode tile is the Hopper split-KV's: needs an sm90 GPU")

import flashbuild  # noqa: E402
from flashbuild.reference import kvcache_ref  # noqa: E402

from test_api_gpu import check, poison_allocator  # noqa: E402
from test_kvcache_gpu import SELECTION, check_lse, poison_unread, to_pages  # noqa: E402

TILE_VAR = "FLASHBUILD_SPLITKV_TILE"
TILES = ["decode", "rows64"]


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


@pytest.fixture(scope="module")
def m_bf16():
    return flashbuild.load(hdim="64,128", dtype="bf16", arch="native", direction="splitkv", causal="off", features=[])


def step(m, monkeypatch, tile, *, batch=3, seqlen_q=1, nheads=32, nheads_k=8, head_dim=64, capacity=1024, lens,
         causal=False, window_size=(-1, -1), softcap=0.0, page_size=0, num_splits=0, seqlen_new=0,
         dtype=torch.float16, seed=0):
    """One call with FLASHBUILD_SPLITKV_TILE=tile on poisoned memory, checked against the fp32 reference; returns out."""
    torch.manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    q = randn(batch, seqlen_q, nheads, head_dim)
    k_cache, v_cache = randn(batch, capacity, nheads_k, head_dim), randn(batch, capacity, nheads_k, head_dim)
    for cache in (k_cache, v_cache):
        poison_unread(cache, lens_t, seqlen_new)
    k = randn(batch, seqlen_new, nheads_k, head_dim) if seqlen_new else None
    v = randn(batch, seqlen_new, nheads_k, head_dim) if seqlen_new else None
    table = None
    if page_size:
        (k_cache, table), (v_cache, _) = to_pages(k_cache, page_size), to_pages(v_cache, page_size)
    kwargs = dict(k=k, v=v, cache_seqlens=lens_t, block_table=table, causal=causal, window_size=window_size,
                  softcap=softcap)
    ref, ref_lse, _, _ = kvcache_ref(q, k_cache, v_cache, **kwargs)
    low, low_lse, _, _ = kvcache_ref(q, k_cache, v_cache, upcast=False, **kwargs)
    monkeypatch.setenv(TILE_VAR, tile)
    poison_allocator()
    out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, num_splits=num_splits, return_softmax_lse=True,
                                         **kwargs)
    torch.cuda.synchronize()
    monkeypatch.delenv(TILE_VAR)
    print(f"\n{tile}: b{batch} sq{seqlen_q} h{nheads}/{nheads_k} d{head_dim} {dtype} cache {capacity} lens {lens} "
          f"causal={causal} window {window_size} softcap {softcap} page {page_size} splits {num_splits} new {seqlen_new}")
    check("out", out, ref, low, "out")
    check_lse(lse, ref_lse, low_lse)
    return out


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("num_splits", [0, 1, 3, 64])
def test_lengths_off_the_block_a_single_key_and_an_empty_row(m, monkeypatch, tile, head_dim, num_splits):
    # 1 key, 0 keys, a length one past a block, one short of the cache, and one mid-block.
    step(m, monkeypatch, tile, batch=5, head_dim=head_dim, lens=[1, 0, 129, 1023, 517], num_splits=num_splits,
         seed=head_dim + num_splits)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("group", [1, 2, 3, 4, 5, 7, 8, 9, 11, 16, 17, 32])
def test_gqa_groups(m, monkeypatch, tile, group):
    # nheads_k 2: a group of `group` query heads packed into one tile's rows (17 and 32: the 64-row tile's).
    for head_dim in (64, 128):
        step(m, monkeypatch, tile, batch=2, nheads=2 * group, nheads_k=2, head_dim=head_dim, capacity=2048,
             lens=[2047, 300], seed=group * 3 + head_dim)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_paged_cache(m, monkeypatch, tile, head_dim):
    for num_splits in (0, 2):
        step(m, monkeypatch, tile, batch=3, head_dim=head_dim, capacity=2048, lens=[2048, 700, 1], page_size=256,
             num_splits=num_splits, seed=head_dim + num_splits)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("seqlen_q", [2, 5, 8, 9, 16, 17])
def test_causal_query_rows(m, monkeypatch, tile, seqlen_q):
    # Several query positions a head (unpacked rows; causal: the bottom-aligned query block); past the tile's rows
    # the 64-row tile.
    for head_dim, num_splits in ((64, 0), (128, 3)):
        step(m, monkeypatch, tile, batch=2, seqlen_q=seqlen_q, nheads=8, nheads_k=8, head_dim=head_dim,
             lens=[900, 40], causal=True, num_splits=num_splits, seed=seqlen_q + head_dim)


@pytest.mark.parametrize("tile", TILES)
def test_window_softcap_and_appended_keys(m, monkeypatch, tile):
    step(m, monkeypatch, tile, batch=2, seqlen_q=4, nheads=8, nheads_k=2, head_dim=64, lens=[800, 33],
         causal=True, window_size=(100, 0), softcap=30.0, num_splits=2, seed=1)
    step(m, monkeypatch, tile, batch=2, seqlen_q=1, nheads=16, nheads_k=2, head_dim=128, lens=[500, 2],
         window_size=(300, 0), seed=2)
    step(m, monkeypatch, tile, batch=3, seqlen_q=3, nheads=8, nheads_k=8, head_dim=128, lens=[0, 517, 1000],
         seqlen_new=3, causal=True, seed=3)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_bf16(m_bf16, monkeypatch, tile, head_dim):
    for num_splits in (0, 1, 5):
        step(m_bf16, monkeypatch, tile, batch=3, head_dim=head_dim, capacity=2048, lens=[2000, 129, 1],
             num_splits=num_splits, dtype=torch.bfloat16, seed=head_dim + num_splits)


def test_the_switch_changes_the_kernel_and_refuses_a_bad_value(m, monkeypatch):
    # The two tiles sum in different orders: over 4k keys their fp16 outputs differ somewhere (both pass the rule).
    outs = [step(m, monkeypatch, tile, batch=4, head_dim=128, capacity=4096, lens=[4096, 4000, 3000, 2049], seed=7)
            for tile in TILES]
    assert not torch.equal(outs[0], outs[1]), "FLASHBUILD_SPLITKV_TILE picked the same kernel for decode and rows64"
    monkeypatch.setenv(TILE_VAR, "wide")
    q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float16)
    cache = torch.randn(1, 256, 2, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="FLASHBUILD_SPLITKV_TILE='wide' is not a split-KV tile: set decode"):
        m.flash_attn_with_kvcache(q, cache, cache)
