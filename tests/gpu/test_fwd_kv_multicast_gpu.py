"""K/V multicast in the Hopper forward (kernels/hopper/fwd_params.h, kMulticastKV): the plain non-causal kernels of head
dims from 128 with an O buffer of their own (hdim 128's 128-key kernel, which serves keys below 6k) run in clusters of
two CTAs that share each K and V box when a head's query blocks are even (kernels/hopper/fwd_launch.h), and one CTA a
box otherwise or with FLASHBUILD_HOPPER_FWD_KV_MULTICAST=off. Both forms do the same arithmetic in the same order, so
their outputs and LSEs are equal bit for bit; both are held to the fp32 reference (docs/correctness.md). The shapes
cover a grid smaller than the SMs (a cluster or two), CTAs that take many tiles (the barriers' phases turn over), odd
query blocks (no cluster), rows and keys that end inside a block and GQA; the kernels that never run clustered (hdim
192 and 256, the 176-key hdim-128 one, softcap) must not change with the setting. Skipped without an sm90 device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="needs an sm90 GPU (the Hopper family)")

import flashbuild  # noqa: E402
from flashbuild.debug.checking import poison  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402
from helpers import check_close, expect_env_error  # noqa: E402

SELECTION = dict(hdim="128,192,256", dtype="fp16,bf16", arch="sm90", direction="fwd", causal="off",
                 features=["softcap"])
ENV = "FLASHBUILD_HOPPER_FWD_KV_MULTICAST"
# (batch, seqlen_q, seqlen_k, heads, heads_k); 128-row query blocks: even counts run clustered.
SHAPES = [
    (1, 256, 300, 4, 1),      # 2 query blocks a head, 8 tiles: a grid of 4 clusters; GQA 4:1
    (2, 130, 77, 2, 2),       # the second query block holds 2 rows, fewer keys than a block
    (2, 1024, 1024, 16, 16),  # 256 tiles on at most 132 CTAs: each CTA takes two
    (4, 2048, 2100, 16, 4),   # 1024 tiles: about 8 a CTA
    (3, 640, 1000, 6, 2),     # 5 query blocks a head: one CTA a box
    (2, 1536, 8300, 8, 8),    # 12 query blocks, 8300 keys: hdim 128's 176-key kernel, keys ending inside a box
]


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def run(m, monkeypatch, setting, q, k, v, softcap):
    monkeypatch.setenv(ENV, setting)
    poison("cuda", [q.numel() * 2, q.shape[0] * q.shape[2] * q.shape[1] * 4])
    out, lse = m.flash_attn_func(q, k, v, softcap=softcap, return_lse=True)
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.parametrize("softcap", [0.0, 30.0], ids=["plain", "softcap"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("hdim", [128, 192, 256])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"b{b}-sq{sq}-sk{sk}-h{h}-{hk}" for b, sq, sk, h, hk in SHAPES])
def test_clusters_give_the_bits_of_one_cta_a_box(m, monkeypatch, shape, hdim, dtype, softcap):
    batch, seqlen_q, seqlen_k, heads, heads_k = shape
    torch.manual_seed(seqlen_q * 7 + seqlen_k + hdim)
    q = torch.randn(batch, seqlen_q, heads, hdim, device="cuda", dtype=dtype)
    k, v = (torch.randn(batch, seqlen_k, heads_k, hdim, device="cuda", dtype=dtype) for _ in range(2))
    out, lse = run(m, monkeypatch, "on", q, k, v, softcap)
    out_one, lse_one = run(m, monkeypatch, "off", q, k, v, softcap)
    assert torch.equal(out, out_one), f"out differs between clusters and one CTA a box: {shape}"
    assert torch.equal(lse, lse_one), f"lse differs between clusters and one CTA a box: {shape}"
    ref, ref_lse = attention_ref(q, k, v, False, softcap=softcap)
    low, low_lse = attention_ref(q, k, v, False, upcast=False, softcap=softcap)
    check_close(f"hdim {hdim} {shape} out", out, ref, low, "out")
    check_close(f"hdim {hdim} {shape} lse", lse, ref_lse, low_lse, "lse")


def test_calls_in_a_row_reuse_the_barriers(m, monkeypatch):
    """Clustered calls one after another on one stream, each on other inputs: no state is left between launches."""
    monkeypatch.setenv(ENV, "on")
    torch.manual_seed(3)
    calls = [[torch.randn(2, 512, 8, 256, device="cuda", dtype=torch.float16) for _ in range(3)] for _ in range(4)]
    outs = [m.flash_attn_func(q, k, v) for q, k, v in calls for _ in range(3)]
    for i, (q, k, v) in enumerate(calls):
        ref = attention_ref(q, k, v, False)[0]
        low = attention_ref(q, k, v, False, upcast=False)[0]
        for j in range(3):
            check_close(f"call {i} repeat {j}", outs[3 * i + j], ref, low, "out")
            assert torch.equal(outs[3 * i + j], outs[3 * i]), f"call {i}: repeat {j} gave other bits"


def test_clustered_calls_replay_in_a_cuda_graph(m, monkeypatch):
    """A clustered launch (cudaLaunchKernelExC with a cluster dimension) captured in a CUDA graph and replayed on new
    inputs: each replay equal to an eager call bit for bit, and to the reference."""
    from test_graph_capture_gpu import capture

    monkeypatch.setenv(ENV, "on")
    torch.manual_seed(13)
    q = torch.randn(2, 512, 8, 128, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(2, 700, 4, 128, device="cuda", dtype=torch.float16) for _ in range(2))
    graph, (out, lse) = capture(lambda: m.flash_attn_func(q, k, v, return_lse=True))
    for replay in range(3):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        graph.replay()
        eager_out, eager_lse = m.flash_attn_func(q, k, v, return_lse=True)
        torch.cuda.synchronize()
        assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse), f"replay {replay} differs from eager"
        ref = attention_ref(q, k, v, False)[0]
        low = attention_ref(q, k, v, False, upcast=False)[0]
        check_close(f"replay {replay}", out, ref, low, "out")


@pytest.mark.parametrize("value", ["1", "yes", "off ", "ON"])
def test_a_bad_setting_is_a_named_error(m, monkeypatch, value):
    q = torch.randn(1, 256, 4, 128, device="cuda", dtype=torch.float16)
    expect_env_error(monkeypatch, ENV, value, lambda: m.flash_attn_func(q, q, q), "`on`", "`off`")
