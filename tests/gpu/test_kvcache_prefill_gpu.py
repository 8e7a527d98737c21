"""KV-cache calls of prefill size on the Hopper forward (flash_api.cpp, mha_fwd_kvcache): a plain cache call
with at least 128 queries runs the forward kernel when the build holds it, with each row's cache_seqlens as
its keys. Held to flashbuild.reference.kvcache_ref in fp32 (the correctness rule (docs/correctness.md)) on poisoned memory: every
cache row past a row's keys holds NaN, which the kernel loads in its last key box and must keep out of P V.
A paged cache (block_table, shuffled pages, NaN in the pages no row uses) runs there too at head dims 32-128.
A profile shows which kernel ran: the Hopper forward for a plain call, paged or not, the split-KV kernel (on
sm90 at head dim 128 the Hopper forward compiled for decoding: kSplitKVKernel in its features) when num_splits
is asked for or the call decodes. Skipped without an sm90 device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="needs an sm90 GPU (the Hopper family)")

import flashbuild  # noqa: E402
from flashbuild.reference import kvcache_ref  # noqa: E402

from test_api_gpu import check, poison_allocator, randn  # noqa: E402
from test_kvcache_gpu import to_pages  # noqa: E402

SELECTION = dict(hdim="32,64,128", dtype="fp16", arch="native", direction="fwd,splitkv", causal="both", features=[])
NAN = float("nan")


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def cache_with_nan_tail(batch, capacity, nheads_k, head_dim, lens):
    """A (batch, capacity, nheads_k, head_dim) cache whose rows past each row's length hold NaN."""
    cache = randn(batch, capacity, nheads_k, head_dim)
    for b, n in enumerate(lens):
        cache[b, n:] = NAN
    return cache


def kernels_of(fn):
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA" and "kernel" in e.name})


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("seqlen_q", [128, 300])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_a_prefill_chunk_matches_the_reference(m, head_dim, seqlen_q, causal):
    torch.manual_seed(head_dim + seqlen_q + causal)
    lens = [700, 300, 1023]  # each at least seqlen_q: the chunk's keys are in the cache
    q = randn(3, seqlen_q, 16, head_dim)
    k_cache = cache_with_nan_tail(3, 1100, 2, head_dim, lens)
    v_cache = cache_with_nan_tail(3, 1100, 2, head_dim, lens)
    cache_seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    poison_allocator()
    out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, causal=causal,
                                         return_softmax_lse=True)
    ref, ref_lse, _, _ = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens, causal=causal)
    low = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens, causal=causal, upcast=False)[0]
    assert not torch.isnan(out).any(), "NaN in the output: a cache row past cache_seqlens reached P V"
    check(f"hdim {head_dim} sq {seqlen_q} out", out, ref, low, "out")
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("page_size", [128, 256])
@pytest.mark.parametrize("head_dim", [32, 64, 128])
def test_a_paged_prefill_chunk_matches_the_reference(m, head_dim, page_size, causal):
    """Each key box is one page's rows (hopper/fwd_mainloop.h, key_box): pages in shuffled order, rows past
    a row's keys and the spare pages hold NaN; cache_seqlens end inside a page."""
    torch.manual_seed(head_dim + page_size + causal)
    lens = [700, 300, 1023]
    q = randn(3, 300, 16, head_dim)
    k_cache = cache_with_nan_tail(3, 1024, 2, head_dim, lens)
    v_cache = cache_with_nan_tail(3, 1024, 2, head_dim, lens)
    k_pages, table = to_pages(k_cache, page_size, seed=1)
    v_pages, _ = to_pages(v_cache, page_size, seed=1)
    cache_seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    poison_allocator()
    out, lse = m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=cache_seqlens, block_table=table,
                                         causal=causal, return_softmax_lse=True)
    ref, ref_lse, _, _ = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens, causal=causal)
    low = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens, causal=causal, upcast=False)[0]
    assert not torch.isnan(out).any(), "NaN in the output: a row past cache_seqlens or a spare page reached P V"
    check(f"hdim {head_dim} page {page_size} out", out, ref, low, "out")
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)
    kernels = kernels_of(lambda: m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=cache_seqlens,
                                                           block_table=table, causal=causal))
    assert any("hopper::fwd_kernel" in n for n in kernels), f"a paged chunk did not run the Hopper forward: {kernels}"


SPLITKV_KERNEL = 1 << 8  # hopper/fwd_params.h, kSplitKVKernel: the split-KV variant's bit of the kernel's features


def hopper_features(kernels) -> set[int]:
    """The kFeatures argument of every Hopper forward kernel that ran: fwd_kernel's last template argument, the
    split-KV decode tile's (splitkv_decode_kernel<traits, is_causal, features, query rows>) next to last."""
    import re
    return {int(f) for n in kernels for pattern in (r"hopper::fwd_kernel<.*, (?:true|false), (\d+)>",
                                                    r"hopper::splitkv_decode_kernel<.*, (?:true|false), (\d+), \d+>")
            for f in re.findall(pattern, n)}


def test_which_kernel_serves_a_cache_call(m, monkeypatch):
    q = randn(2, 256, 16, 128)
    k_cache, v_cache = randn(2, 1024, 2, 128), randn(2, 1024, 2, 128)
    lens = torch.tensor([1000, 512], device="cuda", dtype=torch.int32)
    plain = kernels_of(lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens))
    assert hopper_features(plain) and not any(f & SPLITKV_KERNEL for f in hopper_features(plain)), \
        f"a plain prefill chunk did not run the Hopper forward variant's kernel: {plain}"
    split = kernels_of(lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=2))
    assert hopper_features(split) and all(f & SPLITKV_KERNEL for f in hopper_features(split)), \
        f"num_splits=2 should run the split-KV kernel: {split}"
    # One launch: the last CTA of each query block merges the splits (docs/serving.md), so no combine
    # kernel runs; FLASHBUILD_SPLITKV_PATH=previous brings back the separate combine.
    assert len(split) == 1 and not any("splitkv_combine" in n for n in split), \
        f"two splits on the one-launch path should be one kernel: {split}"
    monkeypatch.setenv("FLASHBUILD_SPLITKV_PATH", "previous")
    previous = kernels_of(lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=2))
    assert any("splitkv_combine" in n for n in previous), f"the previous path: two splits and no combine kernel: {previous}"
    monkeypatch.delenv("FLASHBUILD_SPLITKV_PATH")
    decode = kernels_of(lambda: m.flash_attn_with_kvcache(q[:, :1], k_cache, v_cache, cache_seqlens=lens))
    assert hopper_features(decode) and all(f & SPLITKV_KERNEL for f in hopper_features(decode)), \
        f"decode (one query) should run the split-KV kernel: {decode}"
