"""Issue 48's API cases on CPU, over test_api.py's fake extension: softmax_scale=nan is refused (it made
every output NaN), a Python list as cache_seqlens is a clear error (it was an AttributeError; flash-attn
takes an int or an int tensor, not a list), and a double backward names what is supported (it was
torch's "no autograd formula")."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_api import FakeExtension, qkv  # noqa: E402

from flashbuild import api  # noqa: E402


@pytest.fixture(scope="module")
def m():
    return api.wrap(FakeExtension("_flashbuild_test_hostile_api"))


@pytest.mark.parametrize("scale", [math.nan, math.inf, -math.inf, "0.1", True, [0.1]])
@pytest.mark.parametrize("function", ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"])
def test_a_softmax_scale_that_is_not_a_finite_number_is_refused(m, scale, function):
    q, k, v = qkv(1, 5, 5, 2, 2, 8)
    calls = {
        "flash_attn_func": lambda: m.flash_attn_func(q, k, v, softmax_scale=scale),
        "flash_attn_varlen_func": lambda: m.flash_attn_varlen_func(
            q[0], k[0], v[0], torch.tensor([0, 5], dtype=torch.int32), torch.tensor([0, 5], dtype=torch.int32), 5, 5,
            softmax_scale=scale),
        "flash_attn_with_kvcache": lambda: m.flash_attn_with_kvcache(q, k, v, cache_seqlens=5, softmax_scale=scale),
    }
    with pytest.raises(api.InvalidArgumentError, match=r"softmax_scale=.*softmax_scale=None"):
        calls[function]()


def test_a_finite_softmax_scale_and_none_still_run(m):
    q, k, v = qkv(1, 5, 5, 2, 2, 8)
    assert torch.isfinite(m.flash_attn_func(q, k, v, softmax_scale=0.25)).all()
    assert torch.isfinite(m.flash_attn_func(q, k, v, softmax_scale=1)).all()  # an int is a number
    assert torch.isfinite(m.flash_attn_func(q, k, v, softmax_scale=None)).all()


@pytest.mark.parametrize("name, value", [("cache_seqlens", [5, 9]), ("cache_seqlens", (5, 9)),
                                         ("cache_seqlens", 5.0), ("cache_seqlens", True),
                                         ("cache_seqlens", torch.tensor([5.0, 9.0])),
                                         ("cache_batch_idx", [0, 1]), ("cache_leftpad", [0, 0]),
                                         ("block_table", [[0], [1]])])
def test_an_index_argument_that_is_not_an_int_tensor_is_a_clear_error(m, name, value):
    q, _, _ = qkv(2, 1, 1, 2, 2, 8)
    k_cache, v_cache = (torch.randn(2, 16, 2, 8) for _ in range(2))
    with pytest.raises(api.InvalidArgumentError, match=rf"{name}=.*expected .*int"):
        m.flash_attn_with_kvcache(q, k_cache, v_cache, **{name: value})


def test_an_int_tensor_of_any_int_dtype_is_still_taken(m):
    q, _, _ = qkv(2, 1, 1, 2, 2, 8)
    k_cache, v_cache = (torch.randn(2, 16, 2, 8) for _ in range(2))
    out = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor([5, 9], dtype=torch.int64))
    assert out.shape == q.shape


@pytest.mark.parametrize("varlen", [False, True])
def test_a_double_backward_names_what_is_supported(m, varlen):
    q, k, v = qkv(1, 5, 5, 2, 2, 8, grad=True)
    if varlen:
        cu = torch.tensor([0, 5], dtype=torch.int32)
        out = m.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 5, 5)
    else:
        out = m.flash_attn_func(q, k, v)
    dq, = torch.autograd.grad(out.sum(), q, create_graph=True)  # one backward with a graph: fine
    with pytest.raises(api.UnsupportedFeatureError, match=r"double backward.*one backward is supported"):
        dq.sum().backward()
