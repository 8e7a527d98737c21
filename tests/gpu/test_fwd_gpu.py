"""The built forward kernel on a GPU, against the fp32 reference (skipped without a CUDA device).

Pass rule (docs/correctness.md, through flashbuild's comparator: tests/helpers.py check_close): max
|kernel - fp32 ref| <= 2 * max |PyTorch in fp16 - fp32 ref| + eps, on fresh random inputs, odd sequence lengths, seqlen_q != seqlen_k, GQA/MQA, causal and not; NaN
never passes. Outputs are allocated by the binding, so the allocator's cache is poisoned with NaN
first: an element the kernel forgot to write shows up as NaN.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402
from helpers import check_close  # noqa: E402

SELECTION = dict(hdim=64, dtype="fp16", arch="native", direction="fwd", causal="both", features=[])  # plain TUs


@pytest.fixture(scope="module")
def ext():
    started = time.monotonic()
    module = flashbuild.load(**SELECTION)
    print(f"\nbuild + load: {time.monotonic() - started:.1f}s; variants: {module.variants()}")
    return module


def poison_allocator():
    """Fill cached device memory with NaN so that unwritten outputs read as NaN, in both of PyTorch's
    pools: one large block, and 64 blocks of 1 MiB (the small pool's largest, cut from its 2 MiB
    segments), since every output here is under 1 MiB and comes from the small pool."""
    from flashbuild.debug.checking import poison
    poison("cuda", [1 << 20] * 16)  # 4 copies of each size


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim", [
    (1, 1, 1, 4, 4, 64),
    (2, 17, 17, 4, 4, 64),
    (2, 113, 1023, 8, 2, 64),    # GQA 4:1, seqlen_k > seqlen_q
    (1, 1023, 113, 4, 1, 64),    # MQA, seqlen_q > seqlen_k: causal rows that see no key are 0
    (3, 1, 1023, 6, 3, 64),      # decode-like
    (2, 129, 65, 4, 2, 48),      # head dim 48 runs on the hdim-64 kernel, padded
])
def test_forward_matches_the_fp32_reference(ext, batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim, causal):
    torch.manual_seed(seqlen_q * 7919 + seqlen_k * 31 + nheads_k + causal)
    q = torch.randn(batch, seqlen_q, nheads, head_dim, device="cuda", dtype=torch.float16)
    k = torch.randn(batch, seqlen_k, nheads_k, head_dim, device="cuda", dtype=torch.float16)
    v = torch.randn(batch, seqlen_k, nheads_k, head_dim, device="cuda", dtype=torch.float16)
    poison_allocator()
    out, lse = ext.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, causal)
    low, low_lse = attention_ref(q, k, v, causal, upcast=False)

    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (batch, nheads, seqlen_q) and lse.dtype == torch.float32
    name = f"b{batch} sq{seqlen_q} sk{seqlen_k} h{nheads}/{nheads_k} d{head_dim} causal={causal}"
    check_close(f"{name} out", out, ref, low, "out")
    check_close(f"{name} lse", lse, ref_lse, low_lse, "lse")  # +inf exactly where a row sees no key
    hidden = torch.isinf(ref_lse)
    assert torch.all(out.transpose(1, 2)[hidden] == 0)


def test_default_softmax_scale_is_one_over_sqrt_head_dim(ext):
    q, k, v = (torch.randn(1, 33, 2, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    torch.testing.assert_close(ext.flash_attn_func(q, k, v), ext.flash_attn_func(q, k, v, softmax_scale=0.125))
    scaled = ext.flash_attn_func(q, k, v, softmax_scale=0.3)
    check_close("scale 0.3", scaled, attention_ref(q, k, v, softmax_scale=0.3)[0],
                attention_ref(q, k, v, softmax_scale=0.3, upcast=False)[0], "out")


def test_the_build_holds_exactly_what_was_asked(ext):
    names = ext.variants()
    assert len(names) == 2 and all(n.startswith("fwd_hdim64_fp16_") for n in names)
    assert any("_causal_" in n for n in names)
    assert ext.build_key().startswith(names[0].rsplit("_", 1)[1] + "-fp16-h64-fwd-c01-")


def test_a_head_dim_not_built_raises_the_error_naming_it_and_the_fix(ext):
    q, k, v = (torch.randn(1, 16, 2, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    with pytest.raises(RuntimeError) as info:
        ext.flash_attn_func(q, k, v)
    message = str(info.value)
    assert "fwd_hdim128_fp16" in message and "flashbuild --hdim" in message
    assert isinstance(info.value, flashbuild.VariantNotBuiltError)


def test_a_dtype_not_built_raises_the_error_naming_it(ext):
    q, k, v = (torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with pytest.raises(RuntimeError, match=r"fwd_hdim64_bf16.*flashbuild --hdim"):
        ext.flash_attn_func(q, k, v)


def test_bad_inputs_are_clear_errors(ext):
    q = torch.randn(1, 16, 2, 64, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="CUDA"):
        ext.flash_attn_func(q, q, q)
    qc = q.cuda()
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        ext.flash_attn_func(qc.float(), qc.float(), qc.float())
    with pytest.raises(RuntimeError, match="multiple"):
        ext.flash_attn_func(torch.randn(1, 16, 3, 64, device="cuda", dtype=torch.float16), qc, qc)


def test_noop_rebuild_and_load_is_fast(ext):
    started = time.monotonic()
    again = flashbuild.load(**SELECTION)
    elapsed = time.monotonic() - started
    print(f"\nno-op load (torch already imported): {elapsed:.2f}s")
    assert again is ext
    assert elapsed < 5
