"""Two builds loaded in one process keep their own tables and kernels.

Seen on the H200 before the fix: the build table's `inline constexpr` arrays were GNU_UNIQUE
symbols, bound process-wide, so the second extension read the first one's variant list."""

from __future__ import annotations

import pytest
import torch

import flashbuild

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SMALL = dict(dtype="fp16", arch="native", direction="fwd", causal="off", features=[])


def test_each_build_answers_with_its_own_table_and_kernels():
    a = flashbuild.load(hdim=32, **SMALL)
    b = flashbuild.load(hdim=[32, 96], **SMALL)
    assert a.build_key() != b.build_key()
    assert [v.split("_")[1] for v in a.variants()] == ["hdim32"]
    assert sorted(v.split("_")[1] for v in b.variants()) == ["hdim32", "hdim96"]
    q = torch.randn(1, 77, 2, 96, device="cuda", dtype=torch.float16)
    with pytest.raises(flashbuild.VariantNotBuiltError, match="fwd_hdim96_fp16"):
        a.flash_attn_func(q, q, q)
    out = b.flash_attn_func(q, q, q)
    ref = torch.nn.functional.scaled_dot_product_attention(*(x.transpose(1, 2).float() for x in (q, q, q)))
    assert (out.float() - ref.transpose(1, 2)).abs().max().item() < 1e-2
