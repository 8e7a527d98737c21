"""flash_attn_with_kvcache's plain decoding path (flashbuild/api.py, _plain_decode), on CPU with the fake extension
of test_api.py: a plain call (nothing appended, rotated, indexed or paged, the default window, softcap 0.0, an int32
cache_seqlens on q's device) goes straight to the binding and gives what the full checks' path gives; every call the
checks would convert, copy or refuse takes that path and is converted, copied or refused as before."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from flashbuild import api  # noqa: E402
from flashbuild.api_args import InvalidArgumentError  # noqa: E402

from test_api import FakeExtension  # noqa: E402


@pytest.fixture
def m():
    return api.wrap(FakeExtension())


def tensors(seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 1, 8, 64, generator=gen)
    k, v = torch.randn(2, 96, 2, 64, generator=gen), torch.randn(2, 96, 2, 64, generator=gen)
    return q, k, v, torch.tensor([96, 40], dtype=torch.int32)


def full_checks(m, *args, **kwargs):
    api._DECODE_FAST_PATH = False
    try:
        return m.flash_attn_with_kvcache(*args, **kwargs)
    finally:
        api._DECODE_FAST_PATH = True


@pytest.mark.parametrize("kwargs", [{}, dict(causal=True), dict(softmax_scale=0.3), dict(num_splits=3),
                                    dict(return_softmax_lse=True), dict(cache_seqlens=None)])
def test_a_plain_call_equals_the_checked_one(m, monkeypatch, kwargs):
    q, k, v, lens = tensors()
    kwargs = {"cache_seqlens": lens, **kwargs}
    taken = []
    plain_decode = api._plain_decode
    monkeypatch.setattr(api, "_plain_decode", lambda *a: taken.append(plain_decode(*a)) or taken[-1])
    plain = m.flash_attn_with_kvcache(q, k, v, **kwargs)
    assert len(taken) == 1 and taken[0] is not None, "the plain call did not take the plain path"
    checked = full_checks(m, q, k, v, **kwargs)
    for a, b in zip(*(x if isinstance(x, tuple) else (x,) for x in (plain, checked))):
        assert torch.equal(a, b)
    assert m.ext.calls == ["mha_fwd_kvcache"] * 2
    assert m.ext.kvcache_kwargs == [{}, {}]


def test_calls_the_checks_convert_still_are(m):
    q, k, v, lens = tensors(1)
    expect = full_checks(m, q, k, v, cache_seqlens=lens)
    # an int64 cache_seqlens (made int32), an int one (a tensor), a strided q (copied), an explicit default window
    # and an int softcap (the checks' types): each as the checks make it, the fake binding asserting int32
    assert torch.equal(m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens.long()), expect)
    assert torch.equal(m.flash_attn_with_kvcache(q, k, v, cache_seqlens=96), full_checks(m, q, k, v, cache_seqlens=96))
    strided = torch.randn(2, 1, 8, 128)[..., ::2]
    strided.copy_(q)
    assert torch.equal(m.flash_attn_with_kvcache(strided, k, v, cache_seqlens=lens), expect)
    assert torch.equal(m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, window_size=(-1, -1), softcap=0), expect)


@pytest.mark.parametrize("kwargs, message", [
    (dict(softmax_scale=float("nan")), "softmax_scale=nan: not finite"),
    (dict(softmax_scale="0.1"), "softmax_scale='0.1': not a number"),
    (dict(rotary_interleaved="yes"), "rotary_interleaved='yes'"),
    (dict(window_size=(-1.0, -1)), "not an int"),
    (dict(softcap=-0.5), "softcap=-0.5"),
])
def test_bad_arguments_are_refused_as_before(m, kwargs, message):
    q, k, v, lens = tensors(2)
    with pytest.raises(InvalidArgumentError, match=message):
        m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, **kwargs)
    assert m.ext.calls == []


def test_a_call_that_needs_a_gradient_takes_the_op(m):
    q, k, v, lens = tensors(3)
    out = m.flash_attn_with_kvcache(q.requires_grad_(), k, v, cache_seqlens=lens)
    assert out.requires_grad  # the op's path: its output carries the hook that refuses a backward
    with pytest.raises(Exception, match="backward through flash_attn_with_kvcache"):
        out.sum().backward()
