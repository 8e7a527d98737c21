"""The Hopper split-KV's TMA descriptors kept from call to call (kernels/hopper/splitkv_descriptors.h), on an sm90 GPU
(skipped elsewhere): a launch reuses the descriptors of an earlier one with the same shapes and strides, pointed at
its own q, k_cache, v_cache and out. Checked here: over calls that change each thing the key holds (the pointers,
the cache's capacity, batch rows, head and batch strides, the heads, a page table, unpacked query rows) and more
shapes in turn than the few entries kept, every output and LSE equals the call's with descriptors built for it
(FLASHBUILD_SPLITKV_PATH=fresh-descriptors) bit for bit, on poisoned memory (an output the kernel did not write reads
as NaN); a graph captured on kept descriptors, replayed with new queries, equals eager calls.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                                reason="the kept descriptors are the Hopper split-KV's: needs an sm90 GPU")

import flashbuild  # noqa: E402
from flashbuild.debug.checking import poison  # noqa: E402

from test_kvcache_gpu import SELECTION  # noqa: E402  (hdim 64,128 split-KV, causal both: one build for the files)

PATH_VAR = "FLASHBUILD_SPLITKV_PATH"
PAGE = 128


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.float16)


def ints(values):
    return torch.tensor(values, dtype=torch.int32, device="cuda")


def calls(d):
    """(name, kwargs of flash_attn_with_kvcache) at head dim d: each changes something the descriptors' key holds,
    or only the pointers (`copy`)."""
    q, q2 = randn(2, 1, 32, d), randn(2, 1, 32, d)
    k, v = randn(2, 1024, 8, d), randn(2, 1024, 8, d)
    k2, v2 = randn(2, 1024, 8, d), randn(2, 1024, 8, d)
    big_k, big_v = randn(2, 2048, 8, d), randn(2, 2048, 8, d)  # views of its first 1024 rows: another batch stride
    wide_k, wide_v = randn(2, 1024, 16, d), randn(2, 1024, 16, d)  # every other head: another head stride
    rows_k, rows_v = randn(5, 1536, 8, d), randn(5, 1536, 8, d)  # five cache rows, 1536 positions
    lens = ints([1024, 517])
    pages = 2 * 1024 // PAGE
    table = torch.randperm(pages + 3, device="cuda")[:pages].view(2, -1).int()
    pk, pv = randn(pages + 3, PAGE, 8, d), randn(pages + 3, PAGE, 8, d)
    q16 = randn(2, 1, 16, d)
    q3 = randn(2, 3, 32, d)
    return [
        ("base", dict(q=q, k_cache=k, v_cache=v, cache_seqlens=lens)),
        ("copy", dict(q=q2, k_cache=k2, v_cache=v2, cache_seqlens=lens)),
        ("copy-k-only", dict(q=q, k_cache=k2, v_cache=v, cache_seqlens=lens)),
        ("batch-stride", dict(q=q, k_cache=big_k[:, :1024], v_cache=big_v[:, :1024], cache_seqlens=lens)),
        ("head-stride", dict(q=q, k_cache=wide_k[:, :, ::2], v_cache=wide_v[:, :, ::2], cache_seqlens=lens)),
        ("cache-rows", dict(q=q, k_cache=rows_k, v_cache=rows_v, cache_seqlens=lens, cache_batch_idx=ints([4, 1]))),
        ("paged", dict(q=q, k_cache=pk, v_cache=pv, cache_seqlens=lens, block_table=table)),
        ("heads", dict(q=q16, k_cache=k[:, :, :4], v_cache=v[:, :, :4], cache_seqlens=lens)),
        ("unpacked", dict(q=q3, k_cache=k, v_cache=v, cache_seqlens=lens, causal=True)),
        ("no-lens", dict(q=q2, k_cache=k, v_cache=v)),
    ]


def run(m, monkeypatch, kwargs, fresh):
    if fresh:
        monkeypatch.setenv(PATH_VAR, "fresh-descriptors")
    poison("cuda", [1 << 20] * 4)
    out, lse = m.flash_attn_with_kvcache(**kwargs, return_softmax_lse=True)
    if fresh:
        monkeypatch.delenv(PATH_VAR)
    return out, lse


@pytest.mark.parametrize("head_dim", [64, 128])
def test_kept_descriptors_equal_fresh_ones(m, monkeypatch, head_dim):
    torch.manual_seed(head_dim)
    named = calls(head_dim)
    by_name = dict(named)
    # each shape once (more shapes than entries kept: misses that evict), then runs that hit: the same shapes with
    # other pointers back to back, and three shapes in turn
    order = [name for name, _ in named]
    order += ["base", "copy", "copy-k-only", "base", "copy"] * 2
    order += ["base", "paged", "unpacked", "copy", "paged", "unpacked", "base", "batch-stride", "copy"]
    for i, name in enumerate(order):
        out, lse = run(m, monkeypatch, by_name[name], fresh=False)
        out_f, lse_f = run(m, monkeypatch, by_name[name], fresh=True)
        assert not out.isnan().any(), f"call {i} ({name}): NaN in out (unwritten rows?)"
        assert torch.equal(out, out_f), f"call {i} ({name}): out differs from fresh descriptors'"
        assert torch.equal(lse, lse_f), f"call {i} ({name}): lse differs from fresh descriptors'"


@pytest.mark.parametrize("head_dim", [64, 128])
def test_a_graph_captured_on_kept_descriptors(m, head_dim):
    torch.manual_seed(head_dim + 1)
    k, v = randn(2, 2048, 8, head_dim), randn(2, 2048, 8, head_dim)
    lens = ints([2048, 1000])
    m.flash_attn_with_kvcache(randn(2, 1, 32, head_dim), k, v, cache_seqlens=lens)  # the entry the capture reuses
    q = randn(2, 1, 32, head_dim)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)
    for step in range(3):
        q.copy_(randn(2, 1, 32, head_dim))
        lens.copy_(ints([2048 - 100 * step, 1000 + step]))
        graph.replay()
        expect = m.flash_attn_with_kvcache(q.clone(), k, v, cache_seqlens=lens)
        assert torch.equal(out, expect), f"replay {step}: differs from an eager call"
