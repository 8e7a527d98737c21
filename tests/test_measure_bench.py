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


def test_alone_times_each_backend_in_windows_of_its_own_calls(on_cpu, monkeypatch):
    """--alone: each backend's calls run back to back for the window, the others idle, in turns window by window
    with the order flipped each round; a row's ms is the median window's per call, its reps the fewest calls a
    window held."""
    order = []

    class Logged(Ours):
        def flash_attn_func(self, q, k, v, causal=False, return_lse=False, **features):
            order.append("ours")
            return super().flash_attn_func(q, k, v, causal, return_lse, **features)

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def logged_sdpa(q, k, v, **kw):
        order.append("sdpa")
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", logged_sdpa)
    results = bench.measure(Logged(), FWD, 16, reps=1000, has_fwd=True, device="cpu", alone=0.02)
    by = {r.backend: r for r in results}
    assert by[bench.OURS].ms > 0 and by["sdpa-flash"].ms > 0
    assert 0 < by[bench.OURS].reps < 1000 and by[bench.OURS].reps % bench.ALONE_BATCH == 0  # windows, not --reps
    runs = [who for i, who in enumerate(order) if i == 0 or who != order[i - 1]]  # consecutive calls merged
    # the warm-ups (ours, then SDPA's backends), then windows: ours, sdpa | sdpa, ours | ours, sdpa
    assert runs == ["ours", "sdpa", "ours", "sdpa", "ours", "sdpa"], runs


def test_time_alone_reports_the_median_window(monkeypatch):
    """Three windows a run: the median of their per-call times, not the mean or the last (a window with a slow
    start, as from an idle card, does not move it)."""
    monkeypatch.setattr(torch.cuda, "Event", HostEvent)
    slow = iter([0.02] * bench.ALONE_BATCH)  # the first window's calls are slow

    def run(i):
        time.sleep(next(slow, 0.0))

    ms, fewest = bench.time_alone({"a": run}, 2, 0.01, sync=lambda: None)
    assert fewest >= bench.ALONE_BATCH and ms["a"] < 5, (ms, fewest)
