"""Decoding calls whose tiles outnumber the GPU's slots for the decode tile (two CTAs an SM), on a GPU (skipped without
a CUDA device). The decode tile launches one CTA a tile (kernels/hopper/splitkv_decode_launch.h, decode_grid), so
these calls run in more than one wave of CTAs, dealt by the hardware: one split (the pairs at head dim 64), splits
merged in a cluster (2 at head dim 64, 2-4 at 128) and through L2 (3 at head dim 64), dense and paged caches, causal
both. Checked against kvcache_ref in fp32 by the correctness rule (docs/correctness.md) on poisoned memory (cache rows
past a row's keys read as NaN, and so does an output the kernels do not write); a replayed graph equals eager calls.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import kvcache_ref  # noqa: E402

from test_api_gpu import check, poison_allocator, randn  # noqa: E402
from test_graph_capture_gpu import capture  # noqa: E402
from test_kvcache_gpu import SELECTION, check_lse, poison_unread, to_pages  # noqa: E402

NHEADS_K, GROUP, CAPACITY, PAGE = 8, 4, 384, 128


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def batch_past_the_slots() -> int:
    """A batch whose tiles are more than the SMs' slots (two an SM) even for the pairs (batch x NHEADS_K / 2 tiles)."""
    return torch.cuda.get_device_properties(0).multi_processor_count + 7


def call(m, q, k_cache, v_cache, lens, num_splits, causal, table):
    return m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=num_splits, causal=causal,
                                     block_table=table, return_softmax_lse=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("head_dim, num_splits", [(64, 1), (64, 2), (64, 3), (64, 0), (128, 1), (128, 2), (128, 4),
                                                  (128, 0)])
def test_more_tiles_than_slots_match_the_reference(m, head_dim, num_splits, paged, causal):
    torch.manual_seed(head_dim * 100 + num_splits * 10 + 2 * paged + causal)
    batch = batch_past_the_slots()
    q = randn(batch, 1, NHEADS_K * GROUP, head_dim)
    k_cache, v_cache = randn(batch, CAPACITY, NHEADS_K, head_dim), randn(batch, CAPACITY, NHEADS_K, head_dim)
    lens = torch.randint(1, CAPACITY + 1, (batch,), dtype=torch.int32, device="cuda")
    lens[0], lens[-1] = CAPACITY, 1
    for cache in (k_cache, v_cache):
        poison_unread(cache, lens, 0)
    ref, ref_lse, _, _ = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens, causal=causal)
    low, low_lse, _, _ = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens, causal=causal, upcast=False)
    table = None
    if paged:
        (k_cache, table), (v_cache, _) = to_pages(k_cache, PAGE), to_pages(v_cache, PAGE)
    poison_allocator()
    out, lse = call(m, q, k_cache, v_cache, lens, num_splits, causal, table)
    check("out", out, ref, low, "out")
    check_lse(lse, ref_lse, low_lse)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_a_replayed_call_past_the_slots_equals_eager_calls(m, head_dim):
    torch.manual_seed(head_dim)
    batch = batch_past_the_slots()
    q = randn(batch, 1, NHEADS_K * GROUP, head_dim)
    k_cache, v_cache = randn(batch, CAPACITY, NHEADS_K, head_dim), randn(batch, CAPACITY, NHEADS_K, head_dim)
    lens = torch.full((batch,), CAPACITY // 2, dtype=torch.int32, device="cuda")
    graph, (out, lse) = capture(lambda: call(m, q, k_cache, v_cache, lens, 0, False, None))
    for step in range(3):
        q.copy_(randn(*q.shape))
        lens.copy_(torch.randint(1, CAPACITY + 1, (batch,), dtype=torch.int32, device="cuda"))
        graph.replay()
        eager_out, eager_lse = call(m, q, k_cache, v_cache, lens, 0, False, None)
        torch.cuda.synchronize()
        assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse), f"replay {step} differs from eager"
