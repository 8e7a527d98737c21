"""`flashbuild test`'s checking logic on CPU: a fake extension computes the reference (a correct
kernel) or plants one fault (NaN, an unwritten element, a wrong row, a wrong lse, a wrong dK, an
exception); the checks must pass the first and fail each fault with its reason. Also the
sanitizer's report attribution, which GPU a build's arch runs on, and `flashbuild test` end to end
with the fake extension."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from flashbuild.debug import checking, runtime, sanitize  # noqa: E402
from flashbuild.debug.checking import SHAPES_FULL, SHAPES_QUICK, Shape, check, compare, run_checks  # noqa: E402
from flashbuild.errors import VariantNotBuiltError  # noqa: E402
from flashbuild.reference import attention_ref, kvcache_ref  # noqa: E402
from flashbuild.selection.variants import Variant  # noqa: E402
from helpers import run_cli  # noqa: E402

FWD = Variant("fwd", 64, "fp16", True, "sm90")
BWD = Variant("bwd", 64, "fp16", True, "sm90")
FEATURES = ("local", "softcap")
# Small shapes for the feature checks on CPU: every window bounds the keys of some row; in the second,
# rows 0-29 sit before the first key (causal and right-bounded rows that see none).
SMALL = (Shape(1, 40, 200, 4, 2), Shape(1, 50, 20, 2, 1))


class FakeExt:
    """The built extension's API on CPU: the fp32 reference rounded to the input dtype (what a
    correct kernel returns, up to rounding), with an optional fault."""

    def __init__(self, fault: str | None = None, names=(FWD.name, BWD.name)):
        self.fault = fault
        self.names = list(names)
        self.calls = 0

    def variants(self):
        return self.names

    def build_key(self):
        return "sm90-fp16-h64-fwd+bwd-c1-0123abcd"

    def _features(self, window_size_left, window_size_right, softcap):
        """What this fake kernel applies of the call's window and softcap (a fault drops one)."""
        window = (-1, -1) if self.fault == "ignore-window" else (window_size_left, window_size_right)
        if self.fault == "window-off-by-one" and window[0] >= 0:
            window = (window[0] + 1, window[1])
        return dict(window_size=window, softcap=0.0 if self.fault == "ignore-softcap" else softcap)

    def flash_attn_func(self, q, k, v, causal=False, softmax_scale=None, return_lse=False, window_size_left=-1,
                        window_size_right=-1, softcap=0.0):
        self.calls += 1
        if self.fault == "raise":
            raise VariantNotBuiltError("flashbuild: this build has no kernel fwd_hdim64_fp16_causal_sm90 (...)")
        out, lse = attention_ref(q, k, v, causal, softmax_scale,
                                 **self._features(window_size_left, window_size_right, softcap))
        out = out.to(q.dtype)
        if self.fault == "unwritten":
            out[:, -1, -1, -1] = float("nan")  # what a poisoned output shows where the kernel wrote nothing
        elif self.fault == "wrong-row":
            out[:, -1] += 0.05
        elif self.fault == "zeros":
            out = torch.zeros_like(out)
        elif self.fault == "lse-finite":
            lse = torch.nan_to_num(lse, posinf=0.0)
        elif self.fault == "lse-inf":
            lse[..., -1] = float("inf")  # the last row always sees a key
        elif self.fault == "top-left" and causal:  # SDPA's is_causal: query i sees keys j <= i
            group = q.shape[2] // k.shape[2]
            qt, kt, vt = (t.float().repeat_interleave(g, dim=2).transpose(1, 2)
                          for t, g in ((q, 1), (k, group), (v, group)))
            out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
            out = out.transpose(1, 2).to(q.dtype)
        return (out, lse) if return_lse else out

    def mha_fwd_kvcache(self, q, k_cache, v_cache, cache_seqlens=None, causal=False, softmax_scale=None,
                        num_splits=0, window_size_left=-1, window_size_right=-1, softcap=0.0, **cache):
        assert num_splits == checking.SPLITKV_SPLITS
        features = dict(window_size_left=window_size_left, window_size_right=window_size_right, softcap=softcap)
        if cache_seqlens is None:  # the whole cache, as flash_attn_func sees it
            assert not cache
            return self.flash_attn_func(q, k_cache, v_cache, causal, softmax_scale, return_lse=True, **features)
        self.calls += 1
        if "rotary_cos" in cache:  # the binding's rule: an angle row for every cache position
            table = cache.get("block_table")
            capacity = k_cache.shape[1] * (1 if table is None else table.shape[1])
            assert cache["rotary_cos"].shape[0] >= capacity, "rotary_cos has fewer rows than the cache has positions"
        out, lse, new_k, new_v = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens, causal=causal,
                                             softmax_scale=softmax_scale, **cache,
                                             **self._features(window_size_left, window_size_right, softcap))
        out = out.to(q.dtype)
        if self.fault == "wrong-row":
            out[:, -1] += 0.05
        elif self.fault == "no-rotary-k" and "rotary_cos" in cache:  # the new keys written unrotated
            new_k = kvcache_ref(q, k_cache, v_cache, cache_seqlens=cache_seqlens, k=cache["k"], v=cache["v"],
                                block_table=cache.get("block_table"))[2]
        elif self.fault == "stray-write":
            new_v.view(-1)[-1] += 1.0  # a cache row the call must not touch
        if "k" in cache or self.fault == "stray-write":
            k_cache.copy_(new_k)
            v_cache.copy_(new_v)
        return out, lse

    def mha_bwd(self, dout, q, k, v, out, lse, causal=False, softmax_scale=None, window_size_left=-1,
                window_size_right=-1, softcap=0.0):
        self.calls += 1
        leaves = [t.float().requires_grad_() for t in (q, k, v)]
        ref, _ = attention_ref(*leaves, causal, softmax_scale,
                               **self._features(window_size_left, window_size_right, softcap))
        dq, dk, dv = (g.to(q.dtype) for g in torch.autograd.grad(ref, leaves, dout.float()))
        if self.fault == "dk":
            dk = dk * 1.05
        elif self.fault == "gqa-mean":  # dK/dV averaged over a K/V head's query heads instead of summed
            group = q.shape[2] // k.shape[2]
            dk, dv = dk / group, dv / group
        elif self.fault == "dv-unwritten":
            dv[0, 0, 0, 0] = float("nan")
        return dq, dk, dv


def rows_for(fault=None, variants=(FWD, BWD), shapes=SHAPES_QUICK, seed=0):
    return run_checks(FakeExt(fault), list(variants), shapes, seed=seed, device="cpu")


# ---------------------------------------------------------------- the standard on one tensor

def test_tolerance_is_twice_the_low_precision_error_plus_eps():
    ref = torch.zeros(1000)
    low = ref.clone()
    low[0] = 0.01                               # PyTorch in fp16 is off by 0.01
    at = compare("out", ref + 0.02 + 1e-4 * 0.5, ref, low)
    assert at.tol == pytest.approx(2 * 0.01 + 1e-4)
    assert at.passed and at.max_abs_err == pytest.approx(0.02 + 0.5e-4)
    past = compare("out", torch.where(torch.arange(1000) < 10, 0.03, 0.0), ref, low)
    assert not past.passed and past.reason == "error above tolerance"
    assert past.mismatch_pct == pytest.approx(1.0)  # 10 of 1000 elements past tol
    assert past.ref_err == pytest.approx(0.01)


def test_nan_never_passes_and_counts_as_mismatch():
    ref = torch.ones(100)
    got = ref.clone()
    got[3] = float("nan")
    metric = compare("out", got, ref, ref + 1.0)  # even with a huge tolerance
    assert not metric.passed and metric.reason == checking.REASON_NAN
    assert math.isnan(metric.max_abs_err) and metric.mismatch_pct == pytest.approx(1.0)


def test_a_yardstick_that_is_not_finite_fails_instead_of_passing_everything():
    """PyTorch in the input dtype overflowing (inf) or going NaN would make the tolerance inf or NaN:
    then any output, however wrong, would pass. Such a check fails, naming the yardstick."""
    ref = torch.ones(100)
    wrong = ref + 100.0
    for bad in (float("inf"), float("-inf"), float("nan")):
        low = ref.clone()
        low[7] = bad
        metric = compare("out", wrong, ref, low)
        assert not metric.passed and "PyTorch in the input dtype" in metric.reason, metric
        assert not compare("out", ref.clone(), ref, low).passed  # even a perfect output: the check proves nothing


def test_lse_inf_must_match_exactly_where_a_row_sees_no_key():
    ref = torch.tensor([1.0, float("inf"), 2.0])
    assert compare("lse", ref.clone(), ref, ref).passed
    assert "+inf rows differ" in compare("lse", torch.tensor([1.0, 5.0, 2.0]), ref, ref).reason
    assert "+inf rows differ" in compare("lse", torch.tensor([float("inf"), float("inf"), 2.0]), ref, ref).reason


def test_shape_mismatch_fails():
    metric = compare("dk", torch.zeros(2, 3), torch.zeros(3, 2), torch.zeros(3, 2))
    assert not metric.passed and metric.reason.startswith("shape")


# ---------------------------------------------------------------- inputs and shapes

def test_inputs_are_fresh_random_never_zero_and_reproducible():
    shape = SHAPES_QUICK[1]
    q, k, v, dout = checking.make_inputs(FWD, shape, seed=0, device="cpu")
    assert q.shape == (2, 113, 16, 64) and k.shape == (2, 1023, 2, 64) and q.dtype == torch.float16
    for t in (q, k, v, dout):
        assert (t != 0).float().mean() > 0.99 and t.float().std() > 0.5
    again = checking.make_inputs(FWD, shape, seed=0, device="cpu")[0]
    assert torch.equal(q, again)
    assert not torch.equal(q, checking.make_inputs(FWD, shape, seed=1, device="cpu")[0])
    assert not torch.equal(q[:, :17, :4], checking.make_inputs(FWD, SHAPES_QUICK[0], seed=0, device="cpu")[0][:, :, :4])
    assert not torch.equal(k, checking.make_inputs(Variant("fwd", 64, "fp16", False, "sm90"), shape, 0, "cpu")[1])


def test_shapes_sweep_odd_seqlens_gqa_mqa_and_uneven_causal():
    seqlens = {s.seqlen_q for s in SHAPES_FULL} | {s.seqlen_k for s in SHAPES_FULL}
    assert {1, 17, 113, 1023} <= seqlens
    assert any(s.nheads // s.nheads_k == 8 for s in SHAPES_FULL)        # GQA 8:1
    assert any(s.nheads_k == 1 and s.nheads > 1 for s in SHAPES_FULL)   # MQA
    assert any(s.seqlen_q > s.seqlen_k for s in SHAPES_FULL) and any(s.seqlen_q < s.seqlen_k for s in SHAPES_FULL)
    assert any(s.pad for s in SHAPES_FULL)                              # a head dim that runs padded
    assert set(SHAPES_QUICK) <= set(SHAPES_FULL) and len(SHAPES_QUICK) < len(SHAPES_FULL)
    assert SHAPES_FULL[-1].label(FWD) == "b2 sq129 sk65 h4/2 d56"


# ---------------------------------------------------------------- checks of a fake kernel

def test_a_correct_kernel_passes_every_fwd_and_bwd_check():
    rows = rows_for()
    assert len(rows) == 2 * len(SHAPES_QUICK)
    assert [r.status for r in rows] == ["pass"] * len(rows), [r.reason for r in rows]
    fwd, bwd = rows[0], rows[len(SHAPES_QUICK)]
    assert [m.tensor for m in fwd.metrics] == ["out", "lse"]
    assert [m.tensor for m in bwd.metrics] == ["dq", "dk", "dv"]
    for row in rows:
        for m in row.metrics:
            assert m.ref_err > 0 and m.max_abs_err <= m.tol and m.mismatch_pct == 0


def test_every_full_shape_passes_for_a_correct_kernel_non_causal_too():
    variants = [Variant("fwd", 32, "bf16", False, "sm80"), Variant("bwd", 32, "bf16", True, "sm80"),
                Variant("splitkv", 32, "bf16", True, "sm80")]
    rows = run_checks(FakeExt(), variants, SHAPES_FULL, seed=3, device="cpu")
    assert [r.status for r in rows] == ["pass"] * len(rows), [(r.shape, r.reason) for r in rows if not r.passed]


@pytest.mark.parametrize("fault, variant, tensor, reason", [
    ("unwritten", FWD, "out", "NaN/unwritten"),
    ("wrong-row", FWD, "out", "error above tolerance"),
    ("zeros", FWD, "out", "error above tolerance"),
    ("lse-finite", FWD, "lse", "+inf rows differ"),
    ("lse-inf", FWD, "lse", "+inf rows differ"),
    ("dk", BWD, "dk", "error above tolerance"),
    ("dv-unwritten", BWD, "dv", "NaN/unwritten"),
    ("wrong-row", Variant("splitkv", 64, "fp16", False, "sm90"), "out", "error above tolerance"),
])
def test_each_fault_fails_with_its_reason(fault, variant, tensor, reason):
    shapes = [SHAPES_QUICK[2]] if fault == "lse-finite" else SHAPES_QUICK  # causal rows that see no key
    rows = rows_for(fault, [variant], shapes)
    assert all(r.status == "FAIL" for r in rows), [(r.shape, r.status) for r in rows]
    assert rows[0].worst.tensor == tensor and rows[0].reason.startswith(f"{tensor}: {reason}")
    if fault == "wrong-row":
        assert 0 < rows[0].worst.mismatch_pct < 100


@pytest.mark.parametrize("variant", [FWD, Variant("splitkv", 64, "fp16", True, "sm90")])
def test_a_top_left_causal_mask_fails_where_seqlen_q_and_seqlen_k_differ(variant):
    """flash-attn's causal mask is aligned bottom-right; SDPA's is_causal top-left. The two agree only
    when seqlen_q == seqlen_k, so a kernel with the top-left mask fails exactly the uneven shapes."""
    rows = rows_for("top-left", [variant], SHAPES_QUICK)[:len(SHAPES_QUICK)]  # (not the split-KV cache calls)
    assert [s.seqlen_q == s.seqlen_k for s in SHAPES_QUICK] == [True, False, False]
    assert [r.status for r in rows] == ["pass", "FAIL", "FAIL"], [r.reason for r in rows]
    assert all(r.worst.tensor == "out" for r in rows[1:])


def test_dk_and_dv_of_a_shared_head_must_sum_over_its_query_heads():
    """GQA/MQA: each K/V head serves nheads / nheads_k query heads; its gradients are the sum over
    them. A kernel that averages instead fails every GQA/MQA shape and passes the others."""
    rows = rows_for("gqa-mean", [BWD], SHAPES_QUICK)
    for shape, row in zip(SHAPES_QUICK, rows):
        if shape.nheads == shape.nheads_k:
            assert row.status == "pass", row.reason
        else:
            assert row.status == "FAIL" and row.worst.tensor in ("dk", "dv"), row.reason


SPLITKV = Variant("splitkv", 32, "fp16", True, "sm80")


@pytest.mark.parametrize("variant", [SPLITKV, Variant("splitkv", 64, "bf16", False, "sm90")])
def test_plain_splitkv_variants_check_the_kv_cache_calls_of_a_decoding_step(variant):
    assert checking.checks_for(variant, [])[-len(checking.SPLITKV_CACHE_SHAPES):] == list(checking.SPLITKV_CACHE_SHAPES)
    assert not any(s.cache for s in checking.checks_for(Variant("fwd", 32, "fp16", True, "sm80"), SHAPES_QUICK))
    assert not any(s.cache for s in checking.checks_for(Variant("splitkv", 32, "fp16", True, "sm80", FEATURES),
                                                        SHAPES_QUICK))
    rows = run_checks(FakeExt(), [variant], [], seed=2, device="cpu")
    d = variant.hdim
    assert [r.shape for r in rows] == [f"b3 sq1 sk1023 h16/2 d{d} append 1 rotary halves",
                                       f"b2 sq5 sk700 h8/2 d{d} append 5 rotary interleaved",
                                       f"b3 sq1 sk1023 h8/1 d{d} paged 256",
                                       f"b2 sq3 sk1023 h8/2 d{d} append 3 rotary interleaved paged 256"]
    assert [r.status for r in rows] == ["pass"] * 4, [r.reason for r in rows]
    assert all([m.tensor for m in r.metrics] == ["out", "lse", "k_cache", "v_cache"] for r in rows)


def test_cache_inputs_vary_lengths_and_shuffle_pages():
    call = checking.cache_inputs(SPLITKV, checking.SPLITKV_CACHE_SHAPES[3], seed=0, device="cpu")
    assert call["cache_seqlens"].tolist() == [1020, 923]  # capacity 1023 - 3 new keys - 97 per row
    table = call["block_table"]
    assert table.shape == (2, 4) and table.dtype == torch.int32 and len(set(table.flatten().tolist())) == 8
    assert table.flatten().tolist() != list(range(8)) and call["k_cache"].shape == (10, 256, 2, 32)  # 2 spare pages
    assert call["rotary_cos"].shape == (1024, 8) and call["rotary_interleaved"] is True  # 4 pages of 256
    q, k = call["q"], call["k"]
    assert q.shape == (2, 3, 8, 32) and k.shape == (2, 3, 2, 32) and q.dtype == k.dtype == torch.float16


@pytest.mark.parametrize("fault, tensor", [("no-rotary-k", "k_cache"), ("stray-write", "v_cache"),
                                           ("wrong-row", "out")])
def test_a_kernel_that_gets_the_cache_wrong_fails_its_cache_checks(fault, tensor):
    rows = run_checks(FakeExt(fault), [SPLITKV], [], seed=0, device="cpu")
    failed = [r for r in rows if r.status == "FAIL"]
    assert failed and all(r.reason.startswith(f"{tensor}: error above tolerance") for r in failed if r.worst.tensor
                          == tensor), [(r.shape, r.reason) for r in rows]
    if fault == "no-rotary-k":  # only the rotary checks, and there the keys in the cache are wrong
        assert {r.shape for r in failed} == {r.shape for r in rows if "rotary" in r.shape}
        assert all(any(m.tensor == "k_cache" and not m.passed for m in r.metrics) for r in failed)
    else:
        assert len(failed) == len(rows)


def test_a_call_that_raises_fails_its_row_with_the_error():
    (row,) = rows_for("raise", [FWD], [SHAPES_QUICK[0]])
    assert row.status == "FAIL" and row.error.startswith("VariantNotBuiltError: flashbuild: this build has no kernel")
    assert checking.format_row(row).endswith(f"FAIL ({row.error})")


class LostContextExt(FakeExt):
    """The first forward call dies the way a kernel's out-of-bounds access kills a CUDA context."""

    def __init__(self, message):
        super().__init__()
        self.message = message

    def flash_attn_func(self, *args, **kwargs):
        if self.calls == 0:
            self.calls += 1
            raise RuntimeError(self.message)
        return super().flash_attn_func(*args, **kwargs)


def test_after_a_lost_cuda_context_the_remaining_checks_say_not_run():
    ext = LostContextExt("CUDA error: an illegal memory access was encountered")
    rows = run_checks(ext, [FWD, BWD], SHAPES_QUICK, seed=0, device="cpu")
    assert rows[0].status == "FAIL" and "illegal memory access" in rows[0].error
    assert all(r.status == "skip" and r.skipped.startswith("not run: the CUDA context was lost at "
                                                           f"{FWD.name} {rows[0].shape}") for r in rows[1:])
    assert len(rows) == 2 * len(SHAPES_QUICK) and ext.calls == 1  # nothing else was called
    assert checking.summary(rows).startswith("0 passed, 1 failed")


def test_an_ordinary_error_does_not_stop_the_other_checks():
    ext = LostContextExt("flashbuild: head dim must be in 1..256, got 300")
    rows = run_checks(ext, [FWD], SHAPES_QUICK, seed=0, device="cpu")
    assert rows[0].status == "FAIL" and [r.status for r in rows[1:]] == ["pass"] * (len(SHAPES_QUICK) - 1)


def test_skipped_variants_get_a_row_and_neither_pass_nor_fail():
    rows = run_checks(FakeExt(), [], SHAPES_QUICK, seed=0, device="cpu",
                      skipped=[(Variant("fwd", 64, "fp16", True, "sm80"), "built for sm80")])
    assert [r.status for r in rows] == ["skip"]
    assert checking.summary(rows) == "0 passed, 0 failed, 1 skipped (1 checks of 1 variant)"
    # A run that checked nothing is not a pass: `flashbuild test` exits 1 with this, and the JSON says so.
    problem = checking.verdict(rows)
    assert problem and problem.startswith("nothing was checked (1 checks, every one skipped: built for sm80)")
    assert json.loads(checking.results_json(rows))["passed"] is False
    assert checking.verdict([]) and checking.verdict(rows_for()) is None


def test_table_json_and_summary():
    rows = rows_for() + rows_for("dk", [BWD], [SHAPES_QUICK[0]])
    header = checking.table_header()
    for column in ("variant", "shape", "tensor", "max err", "ref err", "tol", "mismatch", "result"):
        assert column in header
    line = checking.format_row(rows[0])
    assert line.startswith("fwd_hdim64_fp16_causal_sm90") and "b2 sq17 sk17 h4/4 d64" in line and line.endswith("pass")
    assert checking.summary(rows) == "6 passed, 1 failed (7 checks of 2 variants)"
    assert checking.failure_message(rows).startswith("1 of 7 checks failed: bwd_hdim64_fp16_causal_sm90 b2 sq17")
    data = json.loads(checking.results_json(rows, seed=0))
    assert data["format"] == "flashbuild-test" and data["passed"] is False and data["seed"] == 0
    assert data["rows"][-1]["status"] == "FAIL" and data["rows"][-1]["worst"] == "dk"
    assert {"max_abs_err", "ref_err", "tol", "mismatch_pct", "passed"} <= set(data["rows"][0]["metrics"][0])
    nan_row = rows_for("unwritten", [FWD], [SHAPES_QUICK[0]])[0]
    text = checking.results_json([nan_row])
    assert "\": NaN" not in text and json.loads(text)["rows"][0]["metrics"][0]["max_abs_err"] == "nan"  # valid JSON
    assert math.isnan(checking.rows_from_json(text)[0].metrics[0].max_abs_err)
    back = checking.rows_from_json(checking.results_json(rows))
    assert [(r.variant, r.shape, r.status, r.reason) for r in back] == [(r.variant, r.shape, r.status, r.reason)
                                                                         for r in rows]


# ---------------------------------------------------------------- feature variants

def test_a_plain_variant_keeps_its_checks_and_a_feature_variant_gets_window_and_softcap_cases():
    plain = Variant("fwd", 64, "fp16", False, "sm90")
    assert checking.checks_for(plain, SHAPES_FULL) == list(SHAPES_FULL)
    both = Variant("fwd", 64, "fp16", False, "sm90", FEATURES)
    assert checking.feature_cases(both) == [((64, 32), 0.0), ((-1, 5), 0.0), ((37, -1), 0.0), ((0, 0), 0.0),
                                            ((-1, -1), 2.0), ((64, 32), 2.0)]
    causal = Variant("bwd", 64, "fp16", True, "sm90", FEATURES)
    assert checking.feature_cases(causal) == [((37, 0), 0.0), ((0, 0), 0.0), ((-1, -1), 2.0), ((37, 0), 2.0)]
    assert checking.feature_cases(Variant("fwd", 64, "fp16", True, "sm90", ("local",))) == [((37, 0), 0.0),
                                                                                             ((0, 0), 0.0)]
    assert checking.feature_cases(Variant("splitkv", 64, "fp16", False, "sm90", ("softcap",))) == [((-1, -1), 2.0)]
    assert checking.feature_cases(plain) == []
    quick = checking.checks_for(both, SHAPES_QUICK)
    assert len(quick) == 6 * len(SHAPES_QUICK)  # every case on every shape
    assert [s.label(both) for s in quick[:1]] == ["b2 sq17 sk17 h4/4 d64 window 64,32"]
    assert quick[-1].label(both) == "b1 sq1023 sk113 h8/1 d64 window 64,32 softcap 2"
    assert [s.label(both) for s in quick if s.window == (-1, -1)][0] == "b2 sq17 sk17 h4/4 d64 softcap 2"
    assert quick[0].feature_kwargs() == dict(window_size_left=64, window_size_right=32)
    assert quick[-1].feature_kwargs() == dict(window_size_left=64, window_size_right=32, softcap=2.0)
    assert SHAPES_QUICK[0].feature_kwargs() == {}  # a plain check calls as before


def test_feature_checks_run_on_a_few_shapes():
    assert checking.FEATURE_SHAPE_SETS["quick"] == SHAPES_QUICK
    full = checking.FEATURE_SHAPE_SETS["full"]
    assert set(SHAPES_QUICK) < set(full) <= set(SHAPES_FULL) and len(full) == 4
    assert any(s.seqlen_q == 1 and s.seqlen_k == 1023 for s in full)  # sliding-window decoding
    both = Variant("fwd", 64, "fp16", True, "sm90", FEATURES)
    rows = run_checks(FakeExt(), [Variant("fwd", 64, "fp16", True, "sm90"), both], [SMALL[0]], seed=0, device="cpu",
                      feature_shapes=SMALL)
    assert [(r.variant, r.shape) for r in rows[:2]] == [(FWD.name, "b1 sq40 sk200 h4/2 d64"),
                                                        (both.name, "b1 sq40 sk200 h4/2 d64 window 37,0")]
    assert len(rows) == 1 + 4 * len(SMALL)
    assert checking.shape_width([both], [SMALL[0]], SMALL) == len("b1 sq40 sk200 h4/2 d64 window 37,0 softcap 2")


def test_a_correct_kernel_passes_every_feature_check():
    variants = [Variant("fwd", 64, "bf16", False, "sm80", FEATURES), Variant("bwd", 64, "bf16", True, "sm80", FEATURES),
                Variant("splitkv", 32, "fp16", True, "sm80", FEATURES)]
    rows = run_checks(FakeExt(), variants, SHAPES_QUICK, seed=5, device="cpu", feature_shapes=SMALL)
    assert len(rows) == (6 + 4 + 4) * len(SMALL)
    assert [r.status for r in rows] == ["pass"] * len(rows), [(r.variant, r.shape, r.reason) for r in rows if not r.passed]
    assert sum("window" in r.shape for r in rows) and sum("softcap 2" in r.shape for r in rows)
    assert len({(r.variant, r.shape) for r in rows}) == len(rows)  # each row names its case


def test_feature_inputs_differ_per_case():
    both = Variant("fwd", 64, "fp16", False, "sm90", FEATURES)
    checks = checking.checks_for(both, SHAPES_QUICK)
    one, other = checks[0], checks[len(SHAPES_QUICK)]  # one shape, two windows
    assert (one.batch, one.seqlen_q, one.seqlen_k) == (other.batch, other.seqlen_q, other.seqlen_k)
    a = checking.make_inputs(both, one, seed=0, device="cpu")[0]
    b = checking.make_inputs(both, other, seed=0, device="cpu")[0]
    assert a.shape == b.shape and not torch.equal(a, b)


@pytest.mark.parametrize("fault, variant", [
    ("ignore-window", Variant("fwd", 64, "fp16", False, "sm90", FEATURES)),
    ("window-off-by-one", Variant("fwd", 64, "fp16", True, "sm90", ("local",))),
    ("ignore-softcap", Variant("fwd", 64, "fp16", False, "sm90", ("softcap",))),
    ("ignore-window", Variant("bwd", 64, "fp16", True, "sm90", FEATURES)),
    ("ignore-softcap", Variant("bwd", 64, "bf16", False, "sm90", FEATURES)),
    ("ignore-window", Variant("splitkv", 64, "fp16", False, "sm90", ("local",))),
])
def test_a_kernel_that_drops_a_feature_fails_its_feature_checks(fault, variant):
    rows = run_checks(FakeExt(fault), [variant], [], seed=0, device="cpu", feature_shapes=SMALL[:1])
    asked = "window" if "window" in fault else "softcap"
    failed = [r for r in rows if r.status == "FAIL"]
    assert failed and all(asked in r.shape for r in failed)
    tensors = ("dq", "dk", "dv") if variant.direction == "bwd" else ("out", "lse")
    assert all(r.worst.tensor in tensors and r.reason.startswith(f"{r.worst.tensor}: ") for r in failed)
    assert all(r.status == "pass" for r in rows if asked not in r.shape)  # the other feature's cases still pass


# ---------------------------------------------------------------- sanitizer reports

SANITIZED = """\
========= COMPUTE-SANITIZER
variant  shape  ...
@@flashbuild-check\tfwd_hdim64_fp16_causal_sm90\tb2 sq17 sk17 h4/4 d64
fwd_hdim64_fp16_causal_sm90  b2 sq17 sk17 h4/4 d64  out ... pass
@@flashbuild-check\tfwd_hdim64_fp16_causal_sm90\tb2 sq113 sk1023 h16/2 d64
========= Invalid __global__ read of size 16 bytes
=========     at void flashbuild::ampere::fwd_kernel<...>(flashbuild::FwdParams)+0x1a20
=========     by thread (3,0,0) in block (0,1,0)
=========     Address 0x7f00 is out of bounds
========= Invalid __global__ read of size 16 bytes
@@flashbuild-check\tbwd_hdim64_fp16_causal_sm90\tb2 sq17 sk17 h4/4 d64
========= Program hit cudaErrorIllegalAddress (error 700) due to "an illegal memory access" on CUDA API call
========= ERROR SUMMARY: 3 errors
"""


def test_sanitizer_reports_belong_to_the_check_they_follow():
    seen = []
    reports = sanitize.attribute(SANITIZED.splitlines(), on_check=lambda v, s: seen.append(v))
    assert len(seen) == 3
    assert reports == {
        ("fwd_hdim64_fp16_causal_sm90", "b2 sq113 sk1023 h16/2 d64"): "Invalid __global__ read of size 16 bytes",
        ("bwd_hdim64_fp16_causal_sm90", "b2 sq17 sk17 h4/4 d64"):
            'Program hit cudaErrorIllegalAddress (error 700) due to "an illegal memory access" on CUDA API call',
    }
    rows = sanitize.apply(rows_for(shapes=SHAPES_QUICK[:2]), reports)
    by = {(r.variant, r.shape): r for r in rows}
    oob = by[("fwd_hdim64_fp16_causal_sm90", "b2 sq113 sk1023 h16/2 d64")]
    assert oob.status == "FAIL" and oob.reason == "out-of-bounds: Invalid __global__ read of size 16 bytes"
    assert by[("bwd_hdim64_fp16_causal_sm90", "b2 sq17 sk17 h4/4 d64")].reason.startswith("CUDA error under")
    assert by[("fwd_hdim64_fp16_causal_sm90", "b2 sq17 sk17 h4/4 d64")].status == "pass"


def test_marker_lines_round_trip():
    line = sanitize.marker_line("fwd_hdim64_fp16_sm90", "b1 sq1 sk1 h4/4 d64")
    assert sanitize.attribute([line, "========= Invalid __shared__ write of size 4 bytes"]) == {
        ("fwd_hdim64_fp16_sm90", "b1 sq1 sk1 h4/4 d64"): "Invalid __shared__ write of size 4 bytes"}


# ---------------------------------------------------------------- which kernels this GPU runs

@pytest.mark.parametrize("gpu, built, here", [
    (90, ["sm80", "sm90"], ["sm90"]),
    (86, ["sm80", "sm90"], ["sm80"]),
    (89, ["sm80", "sm86"], ["sm86"]),
    (80, ["sm86", "sm90"], []),
])
def test_the_arch_the_binding_picks_is_the_one_tested(gpu, built, here):
    variants = [Variant("fwd", 64, "fp16", False, a) for a in built]
    run, other = runtime.runnable(variants, runtime.Gpu("GPU", gpu, "2.x"))
    assert [v.arch for v in run] == here
    assert len(run) + len(other) == len(variants)


# ---------------------------------------------------------------- `flashbuild test` end to end, fake extension

@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU that is the CPU, and a build whose module is a FakeExt."""
    made = {}

    def use(ext: FakeExt):
        made["ext"] = ext
        monkeypatch.setattr(runtime, "require_gpu", lambda command: runtime.Gpu("Fake H200", 90, "2.x", "cpu"))
        monkeypatch.setattr(runtime, "load_build", lambda selection, options, rebuild=False: ext)
        return ext
    return use


def test_test_command_prints_a_row_per_check_and_writes_json(fake_gpu, tmp_path):
    fake_gpu(FakeExt(names=[FWD.name, BWD.name, "fwd_hdim64_fp16_causal_sm80"]))
    out = tmp_path / "r.json"
    result = run_cli("test", "--hdim", "64", "--dtype", "fp16", "--arch", "sm80,sm90", "--causal", "on",
                     "--shapes", "quick", "--seed", "7", "--json", str(out))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["variant", "shape", "tensor"]
    assert sum(line.endswith(" pass") for line in lines) == 6
    assert "fwd_hdim64_fp16_causal_sm80" in result.stdout and "skip (built for sm80" in result.stdout
    assert lines[-1] == "6 passed, 0 failed, 1 skipped (7 checks of 3 variants)"
    data = json.loads(out.read_text())
    assert data["seed"] == 7 and data["shapes"] == "quick" and data["passed"] is True
    assert data["build_key"] == "sm90-fp16-h64-fwd+bwd-c1-0123abcd" and data["device"].startswith("Fake H200")
    assert data["command"].startswith("flashbuild test --hdim 64 --dtype fp16 --arch sm80,sm90")


def test_test_command_exits_1_with_one_line_naming_the_failures(fake_gpu):
    fake_gpu(FakeExt("dk"))
    result = run_cli("test", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--causal", "on", "--shapes", "quick")
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert line.startswith("flashbuild: error: 3 of 6 checks failed: bwd_hdim64_fp16_causal_sm90 ")
    assert "dk: error above tolerance" in line


def test_test_command_checks_a_feature_variant_with_windows_and_softcap(fake_gpu):
    feature = Variant("fwd", 64, "fp16", True, "sm90", FEATURES)
    fake_gpu(FakeExt(names=[FWD.name, feature.name]))
    result = run_cli("test", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--causal", "on", "--direction",
                     "fwd", "--shapes", "quick")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line.startswith(feature.name)]
    assert len(rows) == 4 * len(SHAPES_QUICK)  # (37, 0), (0, 0), softcap, both: on each quick shape
    assert any(" window 37,0 softcap 2 " in line for line in rows) and any(" window 0,0 " in line for line in rows)
    columns = {line.index(" out ") if " out " in line else line.index(" lse ") for line in lines[1:-1]}
    assert len(columns) == 1  # the shape column is wide enough for the feature labels
    assert lines[-1] == f"{len(SHAPES_QUICK) * 5} passed, 0 failed ({len(SHAPES_QUICK) * 5} checks of 2 variants)"


def test_the_sanitized_child_runs_without_the_caching_allocator(monkeypatch, tmp_path):
    """memcheck sees an overrun only past an allocation: inside one of PyTorch's cached blocks it is
    silent, so the child runs with PYTORCH_NO_CUDA_MEMORY_CACHING=1."""
    import io
    seen = {}

    class FakePopen:
        def __init__(self, command, **kwargs):
            seen.update(command=command, env=kwargs["env"])
            self.stdout = io.StringIO("========= ERROR SUMMARY: 0 errors\n")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait(self):
            return 0

    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: tmp_path / "compute-sanitizer")
    monkeypatch.setattr(sanitize.subprocess, "Popen", FakePopen)
    code, reports, _ = sanitize.run_child(["--hdim", "64"], tmp_path / "r.json", log=lambda line: None)
    assert code == 0 and reports == {}
    assert seen["env"]["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1" and seen["env"][sanitize.MARKERS_ENV] == "1"
    assert seen["command"][1:3] == ["--tool", "memcheck"]
