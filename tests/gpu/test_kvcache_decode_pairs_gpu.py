"""The Hopper split-KV's decode tile over pairs of K/V heads (kernels/hopper/splitkv_decode_launch.h,
launch_decode_pairs: a head-dim-64 decoding call on the head-dim-128 tile, two K/V heads a CTA, Q block-diagonal) on an
sm90 GPU (skipped elsewhere). Each call runs twice, by default and with FLASHBUILD_SPLITKV_PATH=no-pairs (one K/V head a
CTA), both against kvcache_ref in fp32 by the correctness rule (docs/correctness.md) on poisoned memory (unwritten
outputs read as NaN, every cache position a call must not read holds NaN), and the profiler says which kernel ran: the
pairs' where the call qualifies (packed GQA of one query, at most 4 query heads a K/V head, an even count of K/V heads
contiguous in the cache, the split count left to the binding and the pairs filling the GPU with one split), the one-head
tile elsewhere. Shapes: batch 1 to 136 (pairs with one split; calls that would split, that keep one head a CTA), lengths
off the key block, a single key, an empty row, a paged cache, a cache row index and left padding, bf16, a cache whose
heads are not contiguous; then a captured paired call replayed with new lengths equal to eager, and bad index values on
paired calls (named errors, then a good call on the same shapes).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="the decode tile's pairs are the Hopper split-KV's: needs an sm90 GPU")

import flashbuild  # noqa: E402
from flashbuild.reference import kvcache_ref  # noqa: E402

from test_api_gpu import check, poison_allocator  # noqa: E402
from test_kvcache_gpu import check_lse, poison_unread, to_pages  # noqa: E402
from test_kvcache_one_launch_gpu import captured  # noqa: E402

PATH_VAR = "FLASHBUILD_SPLITKV_PATH"
# The paired kernel in the profiler's (demangled) name: the decode kernel on the head-dim-128 tile, in a build of head
# dim 64 alone.
PAIRS = "splitkv_decode_kernel<flashbuild::hopper::FwdTraits<128,"


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(scope="module", params=list(DTYPES))
def built(request):
    """(the extension, its dtype): the plain non-causal hdim-64 split-KV variant, whose build holds the pairs' kernel."""
    return flashbuild.load(hdim=64, dtype=request.param, arch="native", direction="splitkv", causal="off",
                           features=[]), DTYPES[request.param]


def kernels_of(fn):
    """The names of the CUDA kernels fn launches (torch's profiler), fn called once (test_kvcache_prefill_gpu's calls it
    twice: a second output could land in the first's block and hide an unwritten value from the poison)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def call(m, monkeypatch, *, batch, nheads, nheads_k, lens, capacity=1024, page_size=0, num_splits=0, leftpad=None,
         batch_idx=None, cache_rows=None, head_stride_pad=0, dtype, seed, expect_pairs):
    torch.manual_seed(seed)
    rows = cache_rows or batch
    randn = lambda *shape: torch.randn(*shape, device="cuda", dtype=dtype)  # noqa: E731
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    q = randn(batch, 1, nheads, 64)
    k_cache = randn(rows, capacity, nheads_k, 64 + head_stride_pad)[..., :64]
    v_cache = randn(rows, capacity, nheads_k, 64 + head_stride_pad)[..., :64]
    pad_t = None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32, device="cuda")
    idx_t = None if batch_idx is None else torch.tensor(batch_idx, dtype=torch.int32, device="cuda")
    for cache in (k_cache, v_cache):
        poison_unread(cache, lens_t, 0, pad_t, idx_t)
    table = None
    if page_size:
        (k_cache, table), (v_cache, _) = to_pages(k_cache, page_size), to_pages(v_cache, page_size)
    kwargs = dict(cache_seqlens=lens_t, block_table=table, cache_leftpad=pad_t, cache_batch_idx=idx_t)
    ref, ref_lse, _, _ = kvcache_ref(q, k_cache, v_cache, **kwargs)
    low, low_lse, _, _ = kvcache_ref(q, k_cache, v_cache, upcast=False, **kwargs)
    for path in (None, "no-pairs"):
        if path:
            monkeypatch.setenv(PATH_VAR, path)
        poison_allocator()
        result = {}
        names = kernels_of(lambda: result.update(out=m.flash_attn_with_kvcache(
            q, k_cache, v_cache, num_splits=num_splits, return_softmax_lse=True, **kwargs)))
        out, lse = result["out"]
        print(f"\n{path or 'default'}: b{batch} h{nheads}/{nheads_k} {dtype} lens {lens[:6]} page {page_size} "
              f"splits {num_splits} kernels {[n[:60] for n in names]}")
        check("out", out, ref, low, "out")
        check_lse(lse, ref_lse, low_lse)
        paired = any(PAIRS in n for n in names)
        assert paired == (expect_pairs and path is None), (path, names)
        monkeypatch.delenv(PATH_VAR, raising=False)


def lengths(batch, capacity, seed):
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, capacity + 1, (batch,), generator=gen).tolist()
    lens[0], lens[-1] = capacity, 1
    if batch > 2:
        lens[1] = 0
    if batch > 3:
        lens[2] = 129
    return lens


@pytest.mark.parametrize("batch, nheads, nheads_k, capacity, expect_pairs", [
    (64, 32, 8, 1000, True),    # 256 pairs' tiles: one split
    (40, 24, 8, 600, True),     # 3 query heads a K/V head (6 rows a pair)
    (136, 4, 2, 333, True),     # one pair of K/V heads, 136 batch rows
    (48, 48, 12, 640, True),    # an even count of K/V heads that is not a power of two
    (8, 32, 8, 4096, False),    # the pairs would split the keys (four splits): one head a CTA
    (1, 16, 4, 4096, False),    # the pairs would take 16 splits
    (64, 40, 8, 512, False),    # 5 query heads a K/V head: 10 rows a pair, past the tile's 8
    (40, 21, 7, 640, False),    # an odd count of K/V heads
])
def test_pairs_against_the_reference_and_one_head_a_cta(built, monkeypatch, batch, nheads, nheads_k, capacity,
                                                          expect_pairs):
    m, dtype = built
    call(m, monkeypatch, batch=batch, nheads=nheads, nheads_k=nheads_k, capacity=capacity,
         lens=lengths(batch, capacity, batch + nheads), dtype=dtype, seed=batch * nheads, expect_pairs=expect_pairs)


def test_a_paged_cache(built, monkeypatch):
    m, dtype = built
    for batch in (64, 8):
        call(m, monkeypatch, batch=batch, nheads=32, nheads_k=8, capacity=2048, page_size=256,
             lens=lengths(batch, 2048, batch), dtype=dtype, seed=batch, expect_pairs=batch == 64)


def test_a_cache_row_index_and_left_padding(built, monkeypatch):
    m, dtype = built
    batch = 48
    idx = torch.randperm(64, generator=torch.Generator().manual_seed(3))[:batch].tolist()
    lens = lengths(batch, 1024, 5)
    pad = [min(n, (7 * i) % 300) for i, n in enumerate(lens)]
    call(m, monkeypatch, batch=batch, nheads=32, nheads_k=8, capacity=1024, cache_rows=64, batch_idx=idx,
         lens=lens, dtype=dtype, seed=11, expect_pairs=True)
    call(m, monkeypatch, batch=batch, nheads=32, nheads_k=8, capacity=1024, leftpad=pad, lens=lens, dtype=dtype,
         seed=12, expect_pairs=True)


def test_forced_splits_and_heads_apart_take_one_head_a_cta(built, monkeypatch):
    m, dtype = built
    # num_splits given: the caller's count is kept, one head a CTA.
    call(m, monkeypatch, batch=64, nheads=32, nheads_k=8, capacity=1024, num_splits=2, lens=lengths(64, 1024, 1),
         dtype=dtype, seed=1, expect_pairs=False)
    # K/V heads 128 elements apart (a view of a wider cache): two heads' columns are not one row.
    call(m, monkeypatch, batch=64, nheads=32, nheads_k=8, capacity=1024, head_stride_pad=64,
         lens=lengths(64, 1024, 2), dtype=dtype, seed=2, expect_pairs=False)


def test_a_captured_paired_call_replays_as_eager(built):
    m, dtype = built
    torch.manual_seed(21)
    batch, capacity = 64, 2048
    q = torch.randn(batch, 1, 32, 64, device="cuda", dtype=dtype)
    k_cache = torch.randn(batch, capacity, 8, 64, device="cuda", dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    lens = torch.tensor(lengths(batch, capacity, 9), dtype=torch.int32, device="cuda")
    assert any(PAIRS in n for n in kernels_of(lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache,
                                                                                cache_seqlens=lens)))
    graph, out = captured(lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens))
    for seed in (1, 2, 3):
        lens.copy_(torch.tensor(lengths(batch, capacity, seed), dtype=torch.int32))
        q.copy_(torch.randn_like(q))
        graph.replay()
        torch.cuda.synchronize()
        eager = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens)
        assert torch.equal(out, eager), f"replay {seed} differs from eager"


def test_bad_indices_on_paired_calls_are_named_errors_then_a_paired_call_works(built, monkeypatch):
    """Hostile index values at a shape the pairs take (batch 48 over a 64-row cache, 32:8 heads): the host never sees
    the values (no synchronisation), so the paired kernel runs on each; every bad value must come back as
    InvalidIndexError naming the argument, its row and the value, and the same shape with good values must then meet
    the reference on the pairs (the context intact)."""
    m, dtype = built
    m.check_errors()
    batch, capacity, rows, page = 48, 1024, 64, 256
    torch.manual_seed(41)
    q = torch.randn(batch, 1, 32, 64, device="cuda", dtype=dtype)
    k_cache = torch.randn(rows, capacity, 8, 64, device="cuda", dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    (k_pages, table), (v_pages, _) = to_pages(k_cache, page), to_pages(v_cache, page)
    table = table[:batch].contiguous()
    num_pages = k_pages.shape[0]
    ints = lambda values: torch.tensor(values, dtype=torch.int32, device="cuda")  # noqa: E731
    good = lengths(batch, capacity, 6)

    def with_row(values, row, value):
        values = list(values)
        values[row] = value
        return ints(values)

    past, negative = table.clone(), table.clone()
    past[10, 2], negative[31, 0] = num_pages + 5, -7
    cases = [
        ("seqlens past the cache", dict(cache_seqlens=with_row(good, 5, capacity + 1)),
         rf"cache_seqlens\[5\] = {capacity + 1}, outside 0\.\.{capacity}"),
        ("seqlens negative", dict(cache_seqlens=with_row(good, 47, -2)), r"cache_seqlens\[47\] = -2, outside"),
        ("batch_idx past the rows", dict(cache_seqlens=ints(good), cache_batch_idx=with_row(range(batch), 7, rows)),
         rf"cache_batch_idx\[7\] = {rows}, outside 0\.\.{rows - 1}"),
        ("leftpad past the row", dict(cache_seqlens=ints(good), cache_leftpad=with_row([0] * batch, 3, capacity + 9)),
         rf"cache_leftpad\[3\] = {capacity + 9}, outside 0\.\.{capacity}"),
        ("block_table past the pages", dict(cache_seqlens=ints([capacity] * batch), block_table=past),
         rf"block_table\[10, 2\] = {num_pages + 5}, outside 0\.\.{num_pages - 1}"),
        ("block_table negative", dict(cache_seqlens=ints([capacity] * batch), block_table=negative),
         r"block_table\[31, 0\] = -7, outside"),
    ]
    for label, kwargs, message in cases:
        if "block_table" in kwargs:
            k_use, v_use = k_pages, v_pages
        else:  # the 64-row cache, its first 48 rows unless the case picks others
            k_use, v_use = k_cache, v_cache
            kwargs.setdefault("cache_batch_idx", ints(range(batch)))
        names = kernels_of(lambda: m.flash_attn_with_kvcache(q, k_use, v_use, **kwargs))
        assert any(PAIRS in n for n in names), (label, names)
        with pytest.raises(flashbuild.InvalidIndexError, match=message):
            m.check_errors()
        m.check_errors()  # raised once: the record is cleared
        print(f"\n{label}: named error on the paired kernel")
    # The context is intact: good values on the same shapes meet the reference on the pairs.
    call(m, monkeypatch, batch=batch, nheads=32, nheads_k=8, capacity=capacity, cache_rows=rows,
         batch_idx=list(range(batch)), lens=good, dtype=dtype, seed=42, expect_pairs=True)
    call(m, monkeypatch, batch=batch, nheads=32, nheads_k=8, capacity=capacity, page_size=page, lens=good,
         dtype=dtype, seed=43, expect_pairs=True)
