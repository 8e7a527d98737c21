"""bench.measure() on CPU tensors, with torch.cuda.Event stood in for by the host clock: which
backends run, on what inputs, what a refusal reports. (The timings themselves need a GPU:
tests/gpu/test_debug_loop_gpu.py.) The problem is shrunk (TOKENS, MODEL_DIM) so that CPU SDPA
runs it in milliseconds."""

from __future__ import annotations

import time
import warnings

import pytest

torch = pytest.importorskip("torch")

from flashbuild.debug import bench, bench_problems  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402
from flashbuild.selection.variants import Variant  # noqa: E402

FWD = Variant("fwd", 32, "fp16", True, "sm90")
BWD = Variant("bwd", 32, "fp16", True, "sm90")


class HostEvent:
    """torch.cuda.Event on the host clock: elapsed_time in ms between two record() calls."""

    def __init__(self, enable_timing=False):
        self.at = None

    def record(self):
        self.at = time.perf_counter()

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


class Ours:
    """The raw extension's two calls the bench makes, on the reference; it keeps what it was given."""

    def __init__(self):
        self.seen = []

    def variants(self):
        return [FWD.name, BWD.name]

    def flash_attn_func(self, q, k, v, causal=False, return_lse=False, **features):
        self.seen.append(("fwd", q, causal))
        out, lse = attention_ref(q, k, v, causal, **{"window_size": (features.get("window_size_left", -1),
                                                                     features.get("window_size_right", -1))})
        return (out.to(q.dtype), lse) if return_lse else out.to(q.dtype)

    def mha_bwd(self, dout, q, k, v, out, lse, causal=False, **features):
        self.seen.append(("bwd", q, causal))
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(bench_problems, "TOKENS", 64)
    monkeypatch.setattr(bench_problems, "MODEL_DIM", 64)
    monkeypatch.setattr(torch.cuda, "Event", HostEvent)


def test_each_sdpa_backend_is_forced_and_gets_our_inputs(on_cpu, monkeypatch):
    """sdpa_kernel(backend) allows that backend alone: on CPU only the flash one exists, so the
    cuDNN and efficient columns must be n/a (a bench that let SDPA pick, or fall back to its math
    kernel, would time that under their names). SDPA's q is ours transposed, for every call."""
    ours = Ours()
    given = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        given.append((q, kw))
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    results = bench.measure(ours, FWD, 16, reps=3, has_fwd=True, device="cpu")
    by = {r.backend: r for r in results}
    assert list(by) == list(bench.BACKENDS)
    assert by[bench.OURS].ms > 0 and by["sdpa-flash"].ms > 0
    assert by["sdpa-cudnn"].ms is None and by["sdpa-efficient"].ms is None
    assert by["sdpa-cudnn"].note and by["sdpa-cudnn"].reps == 0
    p = bench.problem(FWD, 16)
    assert (p.batch, p.nheads, p.seqlen) == (4, 2, 16)
    for r in (by[bench.OURS], by["sdpa-flash"]):
        assert r.tflops == pytest.approx(bench.flops(p) / (r.ms * 1e-3) / 1e12) and r.reps == 3
    ours_q = {q.data_ptr(): q for kind, q, causal in ours.seen}
    assert all(causal for _, _, causal in ours.seen) and all(kw == {"is_causal": True} for _, kw in given)
    assert given and all(any(torch.equal(q.transpose(1, 2), mine) for mine in ours_q.values()) for q, _ in given)


def test_a_backend_that_refuses_says_why_and_a_broken_peer_is_na_not_a_crash(on_cpu, monkeypatch):
    """SDPA raises "No available kernel" and gives the reason only as a warning: the n/a note keeps
    it. A peer whose adapter raises something else (AttributeError) is n/a, named, and the other
    backends are still measured."""
    def refusing(q, k, v, **kw):
        warnings.warn("Flash attention kernel not used because:")
        warnings.warn("Flash attention requires q, k, v to have the same last dimension")
        raise RuntimeError("No available kernel. Aborting execution.")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", refusing)

    class BrokenPeer(Ours):
        def flash_attn_func(self, *args, **kwargs):
            return self.interface.flash_attn_func(*args, **kwargs)

    results = bench.measure(Ours(), FWD, 16, reps=2, has_fwd=True, device="cpu", peers={"flash-attn-2": BrokenPeer()})
    by = {r.backend: r for r in results}
    assert by[bench.OURS].ms > 0
    assert by["flash-attn-2"].ms is None and by["flash-attn-2"].note.startswith("AttributeError: ")
    note = by["sdpa-flash"].note
    assert note.startswith("No available kernel") and "requires q, k, v to have the same last dimension" in note


def test_the_backward_times_mha_bwd_and_sdpas_autograd_on_the_same_inputs(on_cpu):
    ours = Ours()
    results = bench.measure(ours, BWD, 16, reps=2, has_fwd=True, device="cpu")
    by = {r.backend: r for r in results}
    assert by[bench.OURS].ms > 0 and by["sdpa-flash"].ms > 0
    assert by[bench.OURS].tflops == pytest.approx(
        2.5 * 4 * 4 * 2 * 16 * 16 * 32 / 2 / (by[bench.OURS].ms * 1e-3) / 1e12)
    assert {kind for kind, _, _ in ours.seen} == {"fwd", "bwd"}  # out and lse from our forward, then mha_bwd timed
