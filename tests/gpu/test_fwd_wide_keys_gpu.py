"""The plain non-causal hdim-128 Hopper forward has two kernels (kernels/hopper/fwd_params.h, kWideKeys): its main
one on 128 x 176 tiles and a 128-key one (kKeys128Kernel, <variant>_kernel_keys128.cu) for paged caches, whose
pages are multiples of 128 rows, and for keys shorter than FLASHBUILD_HOPPER_FWD_WIDE_FROM (fwd_launch.h,
run_fwd_sm90). Both are held to the fp32 reference (docs/correctness.md) on the calls where 176, which is not a
power of two, meets a sequence's end: dense lengths around multiples of 176, packed sequences whose last key box
reads the next sequence's NaN and inf, cache rows past cache_seqlens holding NaN, shuffled pages; a profile shows
which kernel ran. Skipped without an sm90 device.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="needs an sm90 GPU (the Hopper family)")

import flashbuild  # noqa: E402
from flashbuild.debug.checking import poison  # noqa: E402
from flashbuild.reference import attention_ref, kvcache_ref  # noqa: E402
from helpers import check_close, expect_env_error  # noqa: E402

from test_hopper_varlen_gpu import check as check_sequence, offsets, packed, run_varlen  # noqa: E402
from test_kvcache_gpu import to_pages  # noqa: E402
from test_kvcache_prefill_gpu import cache_with_nan_tail, kernels_of  # noqa: E402

# The split-KV variant too: a cache call resolves it first (kernels/binding/flash_api.cpp, mha_fwd_kvcache).
SELECTION = dict(hdim=128, dtype="fp16,bf16", arch="sm90", direction="fwd,splitkv", causal="both", features=[])
ENV = "FLASHBUILD_HOPPER_FWD_WIDE_FROM"
KEYS128_KERNEL = 1 << 9  # hopper/fwd_params.h, kKeys128Kernel
# The setting that runs every unpaged call on the 176-key kernel, and the one that runs none there.
SETTINGS = {"wide": "0", "keys128": str(2**31 - 1)}


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


@pytest.fixture(params=sorted(SETTINGS))
def kernel(request, monkeypatch):
    monkeypatch.setenv(ENV, SETTINGS[request.param])
    return request.param


def forward_kernels(fn) -> list[tuple[int, int]]:
    """(block_n, kFeatures) of every Hopper forward kernel that ran."""
    found = []
    for name in kernels_of(fn):
        match = re.search(r"hopper::fwd_kernel<flashbuild::hopper::FwdTraits<128, 128, (\d+),"
                          r".*, (?:true|false), (\d+)>", name)
        if match:
            found.append((int(match.group(1)), int(match.group(2))))
    return found


def expect_kernel(fn, kernel):
    ran = forward_kernels(fn)
    want = (176, 0) if kernel == "wide" else (128, KEYS128_KERNEL)
    assert ran == [want], f"expected the {kernel} kernel {want} (block_n, kFeatures), ran {ran}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("batch, seqlen_q, seqlen_k", [(2, 176, 176), (2, 300, 351), (1, 1000, 1057), (3, 129, 177),
                                                        (1, 64, 2000), (2, 1023, 17)])
def test_dense_calls_match_the_reference_on_both_kernels(m, kernel, dtype, batch, seqlen_q, seqlen_k):
    torch.manual_seed(seqlen_q + seqlen_k)
    q = torch.randn(batch, seqlen_q, 8, 128, device="cuda", dtype=dtype)
    k, v = (torch.randn(batch, seqlen_k, 2, 128, device="cuda", dtype=dtype) for _ in range(2))
    poison("cuda", [q.numel() * 2, batch * 8 * seqlen_q * 4])
    out, lse = m.flash_attn_func(q, k, v, return_lse=True)
    ref, ref_lse = attention_ref(q, k, v, False)
    low, low_lse = attention_ref(q, k, v, False, upcast=False)
    check_close(f"{kernel} sq {seqlen_q} sk {seqlen_k} out", out, ref, low, "out")
    check_close(f"{kernel} sq {seqlen_q} sk {seqlen_k} lse", lse, ref_lse, low_lse, "lse")
    expect_kernel(lambda: m.flash_attn_func(q, k, v), kernel)


def test_packed_sequences_match_the_reference_on_both_kernels(m, kernel):
    q, k, v, cu_q, cu_k, out, lse = run_varlen(m, 128, False, 16, 2, seed=11)
    for i, (q0, q1, k0, k1) in enumerate(zip(cu_q, cu_q[1:], cu_k, cu_k[1:])):
        check_sequence(f"{kernel} seq {i} (sq {q1 - q0}, sk {k1 - k0})", out[None, q0:q1], lse[None, :, q0:q1],
                       q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], False)


@pytest.mark.parametrize("first_keys", [70, 175, 177, 353])
def test_nan_and_inf_in_the_next_sequence_stay_there(m, kernel, first_keys):
    """Sequence 0's keys end inside a key box (of 176 keys or 128), which then reads sequence 1's first rows,
    NaN and inf: zero_v_rows clears them before P V."""
    seqlens_q, seqlens_k = [200, 50], [first_keys, 400]
    torch.manual_seed(first_keys)
    q = packed(seqlens_q, 8, 128)
    k, v = packed(seqlens_k, 2, 128), packed(seqlens_k, 2, 128)
    k[first_keys:], v[first_keys:] = float("nan"), float("inf")
    v[first_keys + 1::2] = float("nan")
    cu_q, cu_k = offsets(seqlens_q), offsets(seqlens_k)
    poison("cuda", [q.numel() * 2, q.shape[0] * 8 * 4])
    out, lse, _ = m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(seqlens_q), max(seqlens_k),
                                           return_attn_probs=True)
    check_sequence(f"{kernel} sequence 0 ({first_keys} keys) beside NaN and inf", out[None, :200],
                   lse[None, :, :200], q[None, :200], k[None, :first_keys], v[None, :first_keys], False)


def test_cache_rows_past_cache_seqlens_stay_out(m, kernel):
    """A prefill-sized cache call (seqused_k): 700 = 3 * 176 + 172 and 1023 keys end inside a 176-key box, whose
    rows past them hold NaN."""
    torch.manual_seed(5)
    lens = [700, 300, 1023]
    q = torch.randn(3, 300, 16, 128, device="cuda", dtype=torch.float16)
    k_cache, v_cache = (cache_with_nan_tail(3, 1100, 2, 128, lens) for _ in range(2))
    cache_seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, return_softmax_lse=True)
    ref, ref_lse, _, _ = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens)
    low = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens, upcast=False)[0]
    assert not torch.isnan(out).any(), "NaN in the output: a cache row past cache_seqlens reached P V"
    check_close(f"{kernel} cache out", out, ref, low, "out")
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)
    expect_kernel(lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens), kernel)


@pytest.mark.parametrize("page_size", [128, 256, 512])
def test_a_paged_cache_runs_the_128_key_kernel(m, page_size, monkeypatch):
    """Whatever the setting, a paged call runs the 128-key kernel: a 176-key box would straddle two pages."""
    monkeypatch.setenv(ENV, "0")
    torch.manual_seed(page_size)
    lens = [700, 300, 1023]
    q = torch.randn(3, 300, 16, 128, device="cuda", dtype=torch.float16)
    k_cache, v_cache = (cache_with_nan_tail(3, 1024, 2, 128, lens) for _ in range(2))
    k_pages, table = to_pages(k_cache, page_size, seed=1)
    v_pages, _ = to_pages(v_cache, page_size, seed=1)
    cache_seqlens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    out = m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=cache_seqlens, block_table=table)
    ref = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens)[0]
    low = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens, upcast=False)[0]
    assert not torch.isnan(out).any(), "NaN in the output: a row past cache_seqlens or a spare page reached P V"
    check_close(f"page {page_size} out", out, ref, low, "out")
    expect_kernel(lambda: m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=cache_seqlens,
                                                    block_table=table), "keys128")


def test_the_setting_splits_calls_at_its_number_of_keys(m, monkeypatch):
    monkeypatch.setenv(ENV, "1000")
    q = torch.randn(1, 256, 16, 128, device="cuda", dtype=torch.float16)
    for seqlen_k, kernel in ((999, "keys128"), (1000, "wide")):
        k, v = (torch.randn(1, seqlen_k, 16, 128, device="cuda", dtype=torch.float16) for _ in range(2))
        expect_kernel(lambda: m.flash_attn_func(q, k, v), kernel)
    # A causal call has one kernel, of 128 keys, whatever the setting.
    monkeypatch.setenv(ENV, "0")
    ran = forward_kernels(lambda: m.flash_attn_func(q, k, v, causal=True))
    assert ran == [(128, 0)], ran


@pytest.mark.parametrize("value", ["x", "-1", "12 ", "99999999999999999999"])
def test_a_bad_setting_is_a_named_error(m, monkeypatch, value):
    q = torch.randn(1, 256, 4, 128, device="cuda", dtype=torch.float16)
    expect_env_error(monkeypatch, ENV, value, lambda: m.flash_attn_func(q, q, q), "whole number")
