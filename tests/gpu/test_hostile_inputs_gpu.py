"""Bad input to a loaded build on a GPU (issue 24, item 11; skipped without a CUDA device).

Each case calls the drop-in API (or the raw extension) the way a careless caller would: wrong
dtypes, CPU tensors, mismatched shapes, heads that do not divide, offsets and cache indices that
point outside their tensors, a feature the build compiled out. Each must raise a Python exception
whose message names the argument, and afterwards the process must still be healthy: the stream
synchronizes without a CUDA error and a correct call still matches the fp32 reference. A CUDA error
(an illegal address, a device assert) would poison the context, so a case that let one through
fails here and every case after it fails too.

Some odd inputs are rightly accepted (a non-contiguous last dim is copied, an empty query returns
an empty output); those are checked for the right result.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.errors import FlashbuildError  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402

from test_api_gpu import FWD_ONLY, SELECTION, randn  # noqa: E402

B, S, H, D = 2, 97, 4, 64


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)   # every feature: fwd, bwd, split-KV (test_api_gpu.py's build)


@pytest.fixture(scope="module")
def plain():
    return flashbuild.load(**FWD_ONLY)    # forward only, local and softcap compiled out


def still_healthy(module) -> None:
    """No CUDA error is pending and a correct call still gives the right answer."""
    torch.cuda.synchronize()
    q, k, v = randn(B, S, H, D), randn(B, S + 5, H, D), randn(B, S + 5, H, D)
    out = module.flash_attn_func(q, k, v, causal=True)
    ref, _ = attention_ref(q, k, v, causal=True)
    assert (out.float() - ref).abs().max().item() < 2e-2


def qkv(**sizes):
    b, s, h, hk, d = (sizes.get(n, dflt) for n, dflt in (("b", B), ("s", S), ("h", H), ("hk", H), ("d", D)))
    return randn(b, s, h, d), randn(b, s, hk, d), randn(b, s, hk, d)


def cache_call(module, *, cache_seqlens=None, cache_batch_idx=None, append=False):
    q = randn(B, 1, H, D)
    rows = B if cache_batch_idx is None else B + 1  # cache_batch_idx picks rows of a larger cache
    k_cache, v_cache = randn(rows, 256, H, D), randn(rows, 256, H, D)
    new = dict(k=randn(B, 3, H, D), v=randn(B, 3, H, D)) if append else {}
    return module.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                          cache_batch_idx=cache_batch_idx, **new)


def varlen_call(module, cu_q, cu_k, max_q, max_k, backward=False):
    total = 150
    q, k, v = (randn(total, H, D, grad=backward) for _ in range(3))
    cu_q, cu_k = (torch.tensor(c, dtype=torch.int32, device="cuda") for c in (cu_q, cu_k))
    out = module.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k)
    if backward:
        out.sum().backward()
    return out


def ints(*values):
    return torch.tensor(values, dtype=torch.int32, device="cuda")


# (case id, call(m, plain), words the message must hold)
CASES = [
    ("float32 q, k, v", lambda m, p: m.flash_attn_func(*(t.float() for t in qkv())), ("float16 or bfloat16",)),
    ("fp16 q with bf16 k, v", lambda m, p: m.flash_attn_func(qkv()[0], *(t.bfloat16() for t in qkv()[1:])),
     ("dtype",)),
    ("CPU tensors", lambda m, p: m.flash_attn_func(*(t.cpu() for t in qkv())), ("CUDA",)),
    ("q on CUDA, k and v on the CPU", lambda m, p: m.flash_attn_func(qkv()[0], *(t.cpu() for t in qkv()[1:])),
     ("CUDA",)),
    ("3-D q", lambda m, p: m.flash_attn_func(qkv()[0][0], *qkv()[1:]), ("q",)),
    ("head dims 64 and 32", lambda m, p: m.flash_attn_func(qkv()[0], *qkv(d=32)[1:]), ("head dim",)),
    ("batch 2 and 3", lambda m, p: m.flash_attn_func(qkv()[0], *qkv(b=3)[1:]), ("batch",)),
    ("k and v of different lengths", lambda m, p: m.flash_attn_func(qkv()[0], qkv()[1], qkv(s=S + 1)[2]), ("v",)),
    ("6 query heads over 4 K/V heads", lambda m, p: m.flash_attn_func(qkv(h=6)[0], *qkv(hk=4)[1:]),
     ("heads",)),
    ("head dim 300", lambda m, p: m.flash_attn_func(*qkv(d=300)), ("head dim",)),
    ("a dropout", lambda m, p: m.flash_attn_func(*qkv(), dropout_p=0.1), ("dropout",)),
    ("a window on a build without local", lambda m, p: p.flash_attn_func(*qkv(), window_size=(16, 0)),
     ("local",)),
    ("a softcap on a build without softcap", lambda m, p: p.flash_attn_func(*qkv(), softcap=5.0), ("softcap",)),
    ("a backward on a forward-only build",
     lambda m, p: p.flash_attn_func(*(t.requires_grad_() for t in qkv())).sum().backward(), ("bwd",)),
    ("cache_seqlens past the cache", lambda m, p: cache_call(m, cache_seqlens=ints(10, 300)), ("cache_seqlens",)),
    ("cache_seqlens negative", lambda m, p: cache_call(m, cache_seqlens=ints(-5, 10)), ("cache_seqlens",)),
    ("cache_seqlens leaving no room to append",
     lambda m, p: cache_call(m, cache_seqlens=ints(10, 254), append=True), ("cache_seqlens",)),
    ("cache_seqlens of the wrong batch", lambda m, p: cache_call(m, cache_seqlens=ints(1, 2, 3)),
     ("cache_seqlens",)),
    ("cache_batch_idx past the cache's rows", lambda m, p: cache_call(m, cache_batch_idx=ints(0, 7)),
     ("cache_batch_idx",)),
    ("cu_seqlens_q past the packed tensor", lambda m, p: varlen_call(m, (0, 100, 400), (0, 50, 150), 300, 100),
     ("cu_seqlens_q",)),
    ("cu_seqlens_k decreasing", lambda m, p: varlen_call(m, (0, 50, 150), (0, 120, 60), 100, 120),
     ("cu_seqlens_k",)),
    ("cu_seqlens_q not starting at 0", lambda m, p: varlen_call(m, (10, 50, 150), (0, 50, 150), 100, 100),
     ("cu_seqlens_q",)),
    ("max_seqlen_q shorter than a sequence", lambda m, p: varlen_call(m, (0, 50, 150), (0, 50, 150), 64, 100),
     ("max_seqlen_q",)),
    ("the same in the varlen backward",
     lambda m, p: m.mha_varlen_bwd(*(randn(150, H, D) for _ in range(5)), torch.zeros(H, 150, device="cuda"),
                                   ints(0, 50, 150), ints(0, 50, 150), 64, 100, False, None, -1, -1, 0.0),
     ("max_seqlen_q",)),
]


@pytest.mark.parametrize("call, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_a_python_error_naming_it(m, plain, call, words):
    with pytest.raises((RuntimeError, ValueError, TypeError, FlashbuildError)) as caught:
        call(m, plain)
        # index values (offsets, cache lengths and rows) are checked on the device, without a host sync: raised
        # by the next call or here (docs/serving.md)
        m.check_errors()
    message = str(caught.value)
    assert "CUDA error" not in message and "illegal" not in message, message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    still_healthy(m)


def test_non_contiguous_last_dim_is_copied_and_right(m):
    wide = randn(B, S, H, 2 * D)
    q = wide[..., ::2]                       # stride 2 along the head dim
    k, v = randn(B, S, H, D), randn(B, S, H, D)
    out = m.flash_attn_func(q, k, v)
    assert (out.float() - attention_ref(q.contiguous(), k, v)[0]).abs().max().item() < 2e-2
    still_healthy(m)


def test_empty_query_gives_an_empty_output(m):
    q = randn(B, 0, H, D)
    k, v = randn(B, S, H, D), randn(B, S, H, D)
    out = m.flash_attn_func(q, k, v)
    assert out.shape == q.shape
    still_healthy(m)


def test_empty_keys_give_zeros_or_an_error_not_nan(m):
    q, k, v = randn(B, S, H, D), randn(B, 0, H, D), randn(B, 0, H, D)
    try:
        out = m.flash_attn_func(q, k, v)
    except (RuntimeError, ValueError, FlashbuildError) as exc:
        assert "k" in str(exc)
    else:
        assert out.shape == q.shape and not out.isnan().any() and (out == 0).all()
    still_healthy(m)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="one GPU: no second device to misplace a tensor on")
def test_tensors_on_two_devices_are_an_error(m):
    q, k, v = qkv()
    with pytest.raises(RuntimeError, match="device"):
        m.flash_attn_func(q, k.to("cuda:1"), v.to("cuda:1"))
    still_healthy(m)
