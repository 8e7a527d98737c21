"""One query row per head with GQA or MQA on sm90 (decoding through flash_attn_func): when the call's
(batch, head) blocks outnumber the SMs, the binding packs each K/V head's query heads into the rows
of one block (flash_api.cpp, mha_fwd_packed_rows). Output and LSE against the fp32 reference, with
poisoned outputs; a causal call must then run the non-causal kernel (one row sees every key), and a
call of one wave or less must not be packed. Needs an sm90 GPU."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm90 GPU (the Hopper forward packs rows)", allow_module_level=True)

import flashbuild  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402

from test_api_gpu import check, grads_of, poison_allocator, randn  # noqa: E402
from test_kvcache_prefill_gpu import kernels_of  # noqa: E402

SELECTION = dict(hdim="64,128", dtype="fp16", arch="native", direction="fwd,bwd", causal="both", features=[])


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def causal_flags_of_kernels(fn):
    """The kIsCausal argument of each forward kernel fn launches (from the profile's demangled names)."""
    names = [n for n in kernels_of(fn) if "fwd_kernel" in n]
    flags = {re.search(r"fwd_kernel<.*>, (true|false), \d+>", n).group(1) for n in names}
    assert flags, f"no forward kernel in the profile: {names}"
    return flags


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("nheads_k", [4, 1], ids=["gqa8", "mqa"])
@pytest.mark.parametrize("head_dim, seqlen_k", [(64, 4097), (128, 1023), (100, 17)])
def test_packed_rows_match_the_reference(m, head_dim, seqlen_k, nheads_k, causal):
    batch, nheads = sms() // 8 + 5, 32  # (batch, head) blocks: several waves
    torch.manual_seed(head_dim + seqlen_k + nheads_k + causal)
    q = randn(batch, 1, nheads, head_dim)
    k, v = randn(batch, seqlen_k, nheads_k, head_dim), randn(batch, seqlen_k, nheads_k, head_dim)
    poison_allocator()
    out, lse, _ = m.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    ref, ref_lse = attention_ref(q, k, v, causal)
    low = attention_ref(q, k, v, causal, upcast=False)[0]
    check(f"hdim {head_dim} sk {seqlen_k} h {nheads}/{nheads_k} out", out, ref, low, "out")
    assert lse.shape == (batch, nheads, 1)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)
    if causal:
        assert causal_flags_of_kernels(lambda: m.flash_attn_func(q, k, v, causal=True)) == {"false"}, \
            "a packed causal row must run the non-causal kernel"


@pytest.mark.parametrize("window", [(-1, 0), (-1, -1), (5000, 0)])
def test_a_window_that_cuts_nothing_in_one_row(m, window):
    """A non-causal window (-1, 0) is the causal mask, which one row does not feel: the packed rows must
    not take it as their own (row j of g would then miss the last g - 1 - j keys)."""
    batch, nheads, nheads_k, seqlen_k = sms() // 8 + 5, 32, 4, 333
    torch.manual_seed(11)
    q = randn(batch, 1, nheads, 64)
    k, v = randn(batch, seqlen_k, nheads_k, 64), randn(batch, seqlen_k, nheads_k, 64)
    poison_allocator()
    out = m.flash_attn_func(q, k, v, window_size=window)
    check(f"window {window}", out, attention_ref(q, k, v)[0], attention_ref(q, k, v, upcast=False)[0], "out")


def test_one_wave_is_not_packed(m):
    """At most one block per SM: packing would only idle SMs, so the causal call keeps its own kernel."""
    q, k, v = randn(2, 1, 32, 64), randn(2, 500, 4, 64), randn(2, 500, 4, 64)
    assert 2 * 32 <= sms()
    assert causal_flags_of_kernels(lambda: m.flash_attn_func(q, k, v, causal=True)) == {"true"}


def test_the_backward_of_a_packed_call(m):
    """The backward reads the packed call's out and lse (lse viewed back as (batch, nheads, 1))."""
    batch, nheads, nheads_k, seqlen_k, head_dim = sms() // 8 + 5, 32, 4, 300, 64
    torch.manual_seed(7)
    q = randn(batch, 1, nheads, head_dim, grad=True)
    k, v = randn(batch, seqlen_k, nheads_k, head_dim, grad=True), randn(batch, seqlen_k, nheads_k, head_dim, grad=True)
    dout = randn(batch, 1, nheads, head_dim)
    poison_allocator()
    got = grads_of(lambda *t: m.flash_attn_func(*t, causal=True), (q, k, v), dout)
    ref = grads_of(lambda *t: attention_ref(*t, True)[0], [t.float() for t in (q, k, v)], dout.float())
    low = grads_of(lambda *t: attention_ref(*t, True, upcast=False)[0], (q, k, v), dout)
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        check(name, g, r, lo, "grad")
