"""The plain decoding call's host path on a GPU (skipped without a CUDA device): flash_attn_with_kvcache straight to the
binding by position (flashbuild/api.py, _plain_decode), a GQA call's query heads packed into rows by strides in the
kernel's parameters (the binding's pack_query_heads), the splits' partials in a block of torch's allocator
(benchmarks/decode_host_allocs/README.md). Checked: q of odd layouts (every other head of a wider tensor, a middle
position of a longer one), GQA groups 1, 4 and 8, split counts 1, 3 and the binding's choice, head dims 64, 128 and 48
(padded to 64), against kvcache_ref in fp32 by the correctness rule (docs/correctness.md) on poisoned memory (an output
the kernels do not write reads as NaN, and so does every cache row past a row's keys); the same call through the full
checks (_DECODE_FAST_PATH off) gives the same bits; the output and LSE come contiguous; a graph captured on the plain
path and replayed with new queries and lengths equals eager calls.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import kvcache_ref  # noqa: E402

from test_api_gpu import check, poison_allocator, randn  # noqa: E402
from test_api_plain_decode import full_checks  # noqa: E402
from test_graph_capture_gpu import capture  # noqa: E402
from test_kvcache_gpu import SELECTION, check_lse, poison_unread  # noqa: E402  (hdim 64,128 split-KV, causal both)

BATCH, NHEADS_K, CAPACITY = 3, 2, 1000
LENS = [1000, 517, 1]


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def query(layout, batch, nheads, head_dim):
    """(batch, 1, nheads, head_dim) with a unit last stride, laid out as asked."""
    if layout == "heads-strided":  # every other head of a wider tensor: head stride 2 * head_dim
        return randn(batch, 1, 2 * nheads, head_dim)[:, :, ::2]
    if layout == "position-of-longer":  # one position of (batch, 3, ...): batch stride 3 * nheads * head_dim
        return randn(batch, 3, nheads, head_dim)[:, 1:2]
    return randn(batch, 1, nheads, head_dim)


def plain_and_full(m, q, k_cache, v_cache, lens, num_splits):
    """(out, lse) of the plain path, and of the same call through the full checks."""
    poison_allocator()
    plain = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=num_splits,
                                      return_softmax_lse=True)
    poison_allocator()
    full = full_checks(m, q, k_cache, v_cache, cache_seqlens=lens, num_splits=num_splits, return_softmax_lse=True)
    torch.cuda.synchronize()
    return plain, full


@pytest.mark.parametrize("num_splits", [0, 1, 3])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("layout", ["contiguous", "heads-strided", "position-of-longer"])
@pytest.mark.parametrize("head_dim", [64, 128, 48])
def test_plain_decode_matches_the_reference_and_the_full_path(m, head_dim, layout, group, num_splits):
    torch.manual_seed(head_dim * 1000 + group * 10 + num_splits)
    nheads = NHEADS_K * group
    q = query(layout, BATCH, nheads, head_dim)
    k_cache, v_cache = randn(BATCH, CAPACITY, NHEADS_K, head_dim), randn(BATCH, CAPACITY, NHEADS_K, head_dim)
    lens = torch.tensor(LENS, dtype=torch.int32, device="cuda")
    for cache in (k_cache, v_cache):
        poison_unread(cache, lens, 0)
    ref, ref_lse, _, _ = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens)
    low, low_lse, _, _ = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens, upcast=False)
    (out, lse), (full_out, full_lse) = plain_and_full(m, q, k_cache, v_cache, lens, num_splits)
    assert out.shape == q.shape and lse.shape == (BATCH, nheads, 1)
    assert out.is_contiguous() and lse.is_contiguous()
    check("out", out, ref, low, "out")
    check_lse(lse, ref_lse, low_lse)
    assert torch.equal(out, full_out) and torch.equal(lse, full_lse), "the plain path and the full checks differ"


def test_plain_decode_returns_a_tuple_and_out_alone_without_the_lse(m):
    q = randn(2, 1, 8, 64)
    k_cache, v_cache = randn(2, 256, NHEADS_K, 64), randn(2, 256, NHEADS_K, 64)
    lens = torch.tensor([256, 100], dtype=torch.int32, device="cuda")
    both = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, return_softmax_lse=True)
    alone = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens)
    assert type(both) is tuple and len(both) == 2
    assert isinstance(alone, torch.Tensor) and torch.equal(alone, both[0])


@pytest.mark.parametrize("head_dim", [64, 128])
def test_a_replayed_plain_call_with_splits_equals_eager_calls(m, head_dim):
    """Batch 1 with 8k keys: the binding splits the keys, so the captured call's partials come from the graph's pool."""
    capacity, nheads = 8192, 4 * NHEADS_K
    k_cache, v_cache = randn(1, capacity, NHEADS_K, head_dim), randn(1, capacity, NHEADS_K, head_dim)
    q = randn(1, 1, nheads, head_dim)
    lens = torch.tensor([capacity], dtype=torch.int32, device="cuda")

    def call():
        return m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, return_softmax_lse=True)

    graph, replayed = capture(call)
    for length in (capacity, 5000, 1):
        q.copy_(randn(1, 1, nheads, head_dim))
        lens.fill_(length)
        graph.replay()
        eager = call()
        torch.cuda.synchronize()
        assert torch.equal(replayed[0], eager[0]) and torch.equal(replayed[1], eager[1]), f"{length} keys"
        ref, _, _, _ = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens)
        low, _, _, _ = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens, upcast=False)
        check("out", eager[0], ref, low, "out")
