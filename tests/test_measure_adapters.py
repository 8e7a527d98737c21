"""The adapters `flashbuild test` and `bench` call an upstream tree's slice through, on stand-in
packages (no GPU, no tree): every call our checks and the bench make must reach the tree's own
Python functions with the arguments flash-attn takes."""

from __future__ import annotations

import types

from flashbuild.debug import adapters

MANIFEST = {"key": "fa2-key", "selection": {"features": []},
            "units": [{"direction": "fwd", "hdim": 64, "dtype": "fp16", "causal": False, "archs": ["sm80"]}]}


def fake_flash_attn(calls: list):
    """The flash_attn package as load_package imports it: flash_attn_interface holds
    flash_attn_func, flash_attn_with_kvcache, _flash_attn_backward and the extension."""
    interface = types.ModuleType("flash_attn.flash_attn_interface")
    interface.flash_attn_gpu = "flash_attn_2_cuda"

    def flash_attn_func(q, k, v, **kw):
        calls.append(("flash_attn_func", kw))
        return "out", "lse", None

    def flash_attn_with_kvcache(q, k_cache, v_cache, **kw):
        calls.append(("flash_attn_with_kvcache", kw))
        return "out", "lse"

    interface.flash_attn_func = flash_attn_func
    interface.flash_attn_with_kvcache = flash_attn_with_kvcache
    package = types.ModuleType("flash_attn")
    package.flash_attn_interface = interface
    package.flash_attn_func = flash_attn_func
    package.flash_attn_with_kvcache = flash_attn_with_kvcache
    return package


def test_the_fa2_adapter_reaches_the_trees_flash_attn_func_and_kvcache():
    """Every forward call of `flashbuild test` / `bench` on an FA2 slice goes through these two; an
    adapter that cannot reach them fails every row (AttributeError) and stops the bench."""
    calls: list = []
    fa2 = adapters.wrap("flash-attn-2", fake_flash_attn(calls), MANIFEST)
    assert fa2.ext == "flash_attn_2_cuda" and fa2.variants() == ["fwd_hdim64_fp16_sm80"]
    assert fa2.flash_attn_func("q", "k", "v", causal=True, return_lse=True, window_size_left=8,
                               window_size_right=0) == ("out", "lse")
    assert fa2.flash_attn_func("q", "k", "v") == "out"
    assert calls[0] == ("flash_attn_func", dict(causal=True, window_size=(8, 0), softcap=0.0, return_attn_probs=True))
    torch_free_lens = [3]  # cache_seqlens given: no torch needed to fill them in
    assert fa2.mha_fwd_kvcache("q", "kc", "vc", torch_free_lens, causal=True, num_splits=3) == ("out", "lse")
    name, kw = calls[-1]
    assert name == "flash_attn_with_kvcache" and kw["num_splits"] == 3 and kw["return_softmax_lse"] is True
    assert kw["cache_seqlens"] == [3] and kw["window_size"] == (-1, -1)
