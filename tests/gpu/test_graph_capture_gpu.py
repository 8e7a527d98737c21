"""Attention calls captured in CUDA graphs (torch.cuda.graph) and replayed with new inputs written into
the captured tensors, on a GPU (skipped without one): flash_attn_with_kvcache dense and paged, with and
without appended keys and rotary, with cache_seqlens (and the block table) changing between replays, and
flash_attn_func / flash_attn_varlen_func forward. Each replay's outputs (and, when appending, the caches)
are bit-identical to an eager call on the same inputs, and meet the fp32 reference
(flashbuild.debug.checking.compare); a bad cache_seqlens written before a replay is raised by
check_errors() after it (docs/serving.md).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.debug.checking import compare  # noqa: E402
from flashbuild.reference import attention_ref, kvcache_ref  # noqa: E402

from test_kvcache_index_checks_gpu import BUILDS, HEAD_DIM  # noqa: E402

BATCH, NHEADS, NHEADS_K, CAPACITY, PAGE = 5, 8, 2, 512, 128
REPLAYS = 3


@pytest.fixture(scope="module", params=sorted(BUILDS))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def m(family):
    return flashbuild.load(**BUILDS[family])


def randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.float16)


def capture(fn):
    """fn captured in a graph after warm-up on a side stream (torch's recipe); returns (graph, outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    return graph, outputs


def check_reference(got, ref, low):
    for name, g, r, lo in zip(("out", "lse"), got, ref, low):
        metric = compare(name, g, r, lo)
        assert metric.passed, metric


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("append, rotary", [(False, False), (True, False), (True, True)])
def test_kvcache_replays_equal_eager_calls(m, family, paged, append, rotary):
    torch.manual_seed(11 + 2 * paged + 4 * append + 8 * rotary)
    d = HEAD_DIM[family]
    seqlen_new = 3 if append else 0
    q = randn(BATCH, 1, NHEADS, d)
    if paged:
        pages = BATCH * CAPACITY // PAGE + 3
        k_cache, v_cache = randn(pages, PAGE, NHEADS_K, d), randn(pages, PAGE, NHEADS_K, d)
        table = torch.randperm(pages, device="cuda")[:BATCH * CAPACITY // PAGE].view(BATCH, -1).int()
    else:
        k_cache, v_cache = randn(BATCH, CAPACITY, NHEADS_K, d), randn(BATCH, CAPACITY, NHEADS_K, d)
        table = None
    lens = torch.zeros(BATCH, dtype=torch.int32, device="cuda")
    new = dict(k=randn(BATCH, seqlen_new, NHEADS_K, d), v=randn(BATCH, seqlen_new, NHEADS_K, d)) if append else {}
    rope = dict(rotary_cos=randn(CAPACITY, 16), rotary_sin=randn(CAPACITY, 16)) if rotary else {}
    extra = dict(new, **rope, block_table=table, causal=False)

    def call(q=q, k_cache=k_cache, v_cache=v_cache, lens=lens, extra=extra):
        return m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, return_softmax_lse=True, **extra)

    lens.copy_(torch.randint(1, CAPACITY - seqlen_new, (BATCH,), device="cuda"))
    graph, (out, lse) = capture(call)
    for replay in range(REPLAYS):
        # new values in the captured tensors: queries, lengths (one row at its extremes), keys, pages
        q.copy_(randn(*q.shape))
        lengths = torch.randint(1, CAPACITY - seqlen_new, (BATCH,), device="cuda")
        lengths[replay % BATCH] = CAPACITY - seqlen_new if replay % 2 else 0
        lens.copy_(lengths)
        for t in new.values():
            t.copy_(randn(*t.shape))
        if table is not None:
            table.copy_(table.flatten()[torch.randperm(table.numel(), device="cuda")].view_as(table))
        k_before, v_before = k_cache.clone(), v_cache.clone()
        graph.replay()
        k_replayed, v_replayed = k_cache.clone(), v_cache.clone()
        k_cache.copy_(k_before), v_cache.copy_(v_before)
        eager_out, eager_lse = call()
        assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse), f"replay {replay}: differs from eager"
        assert torch.equal(k_replayed, k_cache) and torch.equal(v_replayed, v_cache), f"replay {replay}: caches"
        kw = dict(cache_seqlens=lens, block_table=table, **new, **rope)
        ref = kvcache_ref(q, k_before, v_before, **kw)
        low = kvcache_ref(q, k_before, v_before, upcast=False, **kw)
        check_reference((out, lse), ref[:2], low[:2])
    m.check_errors()


def test_a_bad_length_written_before_a_replay_is_raised_after_it(m, family):
    torch.manual_seed(5)
    d = HEAD_DIM[family]
    q, k_cache, v_cache = randn(BATCH, 1, NHEADS, d), randn(BATCH, CAPACITY, NHEADS_K, d), randn(BATCH, CAPACITY,
                                                                                                   NHEADS_K, d)
    lens = torch.full((BATCH,), 7, dtype=torch.int32, device="cuda")
    graph, (out,) = capture(lambda: (m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens),))
    lens[3] = CAPACITY + 9
    graph.replay()
    with pytest.raises(flashbuild.InvalidIndexError, match=rf"cache_seqlens\[3\] = {CAPACITY + 9}"):
        m.check_errors()
    lens[3] = 100
    graph.replay()
    m.check_errors()
    ref = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens)
    low = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens, upcast=False)
    assert compare("out", out, ref[0], low[0]).passed


def test_forward_replays_equal_eager_calls(m, family):
    if family != "hopper":
        pytest.skip("the forward is in the hopper build")
    torch.manual_seed(7)
    q, k, v = randn(2, 97, NHEADS, 64), randn(2, 301, NHEADS_K, 64), randn(2, 301, NHEADS_K, 64)
    qv, kv, vv = randn(60, NHEADS, 64), randn(150, NHEADS_K, 64), randn(150, NHEADS_K, 64)
    cu_q = torch.tensor([0, 21, 60], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 99, 150], dtype=torch.int32, device="cuda")
    graph, (out, lse, out_v) = capture(lambda: (*m.flash_attn_func(q, k, v, return_lse=True),
                                                m.flash_attn_varlen_func(qv, kv, vv, cu_q, cu_k, 60, 110)))
    for replay in range(REPLAYS):
        for t in (q, k, v, qv, kv, vv):
            t.copy_(randn(*t.shape))
        split_q, split_k = 1 + replay * 13, 40 + replay * 29  # sequence lengths change with the offsets
        cu_q[1], cu_k[1] = split_q, split_k
        graph.replay()
        eager_out, eager_lse = m.flash_attn_func(q, k, v, return_lse=True)
        eager_v = m.flash_attn_varlen_func(qv, kv, vv, cu_q, cu_k, 60, 110)
        assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse) and torch.equal(out_v, eager_v)
        ref, low = attention_ref(q.float(), k.float(), v.float()), attention_ref(q, k, v, upcast=False)
        check_reference((out, lse), ref, low)
        for (q0, q1), (k0, k1) in (((0, split_q), (0, split_k)), ((split_q, 60), (split_k, 150))):
            r, _ = attention_ref(qv[None, q0:q1].float(), kv[None, k0:k1].float(), vv[None, k0:k1].float())
            lo, _ = attention_ref(qv[None, q0:q1], kv[None, k0:k1], vv[None, k0:k1], upcast=False)
            assert compare("out", out_v[None, q0:q1], r, lo).passed
    m.check_errors()
