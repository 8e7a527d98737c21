"""`flashbuild test`: check exactly the variants a build holds against the fp32 reference.

The standard (docs/correctness.md): fresh random inputs (never zeros) from the seed, odd sequence
lengths, GQA 8:1 and MQA, causal with seqlen_q != seqlen_k, outputs poisoned first. A tensor passes
when max |kernel - fp32 ref| <= 2 * max |PyTorch in the input dtype - fp32 ref| + eps (EPS, by the
kind of tensor); NaN never passes. `compare` is that rule, the one place it is coded: `flashbuild
test` and the GPU tests (tests/helpers.py: check_close) both call it. Forward variants are checked on out and lse; backward variants on dq, dk, dv against fp32
autograd through the reference (given the reference's out and lse, so a bwd-only build is checked
alone); split-KV variants on out and lse of mha_fwd_kvcache over the whole cache, split 3 ways, and
plain split-KV variants also on the KV-cache calls of a decoding step (SPLITKV_CACHE_SHAPES: new keys
appended with rotary embedding, a paged cache with a shuffled block table, both together), on out,
lse and the whole caches after the call (k_cache: the new rows rotated, every other row untouched). One
row per variant and shape; its numbers are those of the tensor furthest past its tolerance.

A feature variant (e.g. fwd_hdim64_fp16_sm90_local_softcap) runs only for calls that ask for a
window or a softcap, so its checks are those calls: local windows (causal (37, 0) and (0, 0);
non-causal (64, 32), right-only (-1, 5), left-only (37, -1) and (0, 0)), softcap 2.0 (on
standard-normal inputs, where tanh visibly saturates), and both together; each over the quick
shapes (and the decode-like one with --shapes full). The reference applies the same window and
softcap (bwd: autograd through the tanh), and the row's shape label names them.

Everything here but poisoning runs on CPU tensors too, so tests check the logic without a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

from ..selection.variants import Variant, feature_kwargs

TOLERANCE_FACTOR = 2.0
# The absolute eps by kind of tensor (docs/correctness.md): outputs and caches 1e-4, LSE 1e-3, gradients
# 1e-3 (each is summed over a sequence's rows, so its fp32 rounding alone reaches 1e-4 on short rows).
EPS = {"out": 1e-4, "lse": 1e-3, "grad": 1e-3}
EPS_KIND = {"dq": "grad", "dk": "grad", "dv": "grad"}  # tensor name -> kind; any other name is an "out"
POISON_BLOCK_BYTES = 256 << 20  # a large NaN block for the allocator to split
POISON_COPIES = 4               # NaN blocks of each output size: the binding's temporaries take some
JSON_FORMAT = "flashbuild-test"
REASON_NAN = "NaN/unwritten"
REASON_OOB = "out-of-bounds"
SPLITKV_SPLITS = 3  # forced, so that small shapes split too and the combine step runs
MARKER = "@@flashbuild-check"   # printed before each check when sanitized: attributes reports to it


# ---------------------------------------------------------------- shapes

@dataclass(frozen=True)
class CacheCase:
    """How a split-KV check uses the KV cache beyond reading all of it: seqlen_new keys appended
    (k=, v=) after per-row cache lengths, rotated ("interleaved": GPT-J pairs, "halves": GPT-NeoX)
    over half the head dim, and/or a paged cache of page_size rows per page (0: contiguous)."""

    seqlen_new: int = 0
    rotary: str = ""
    page_size: int = 0

    def label(self) -> str:
        parts = [f"append {self.seqlen_new}"] if self.seqlen_new else []
        parts += [f"rotary {self.rotary}"] if self.rotary else []
        parts += [f"paged {self.page_size}"] if self.page_size else []
        return " ".join(parts)


@dataclass(frozen=True)
class Shape:
    """A problem size; head_dim = the kernel's head dim minus `pad` (a smaller head dim runs on the
    kernel, padded). A feature check also carries the call's window_size and softcap; a KV-cache
    check its CacheCase (seqlen_k is then the cache's capacity)."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    nheads: int
    nheads_k: int
    pad: int = 0
    note: str = ""
    window: tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    cache: CacheCase | None = None

    def head_dim(self, variant: Variant) -> int:
        return variant.hdim - self.pad

    def label(self, variant: Variant) -> str:
        label = (f"b{self.batch} sq{self.seqlen_q} sk{self.seqlen_k} h{self.nheads}/{self.nheads_k} "
                 f"d{self.head_dim(variant)}")
        if self.window != (-1, -1):
            label += f" window {self.window[0]},{self.window[1]}"
        if self.softcap:
            label += f" softcap {self.softcap:g}"
        if self.cache is not None:
            label += f" {self.cache.label()}"
        return label

    def feature_kwargs(self) -> dict[str, Any]:
        """The raw functions' keywords for this check's window and softcap (none for a plain one)."""
        return feature_kwargs(self.window, self.softcap)


SHAPES_FULL = (
    Shape(1, 1, 1, 4, 4, note="one query, one key"),
    Shape(2, 17, 17, 4, 4, note="odd seqlen"),
    Shape(2, 113, 113, 8, 1, note="MQA"),
    Shape(1, 1023, 1023, 4, 4, note="odd seqlen, many blocks"),
    Shape(2, 113, 1023, 16, 2, note="GQA 8:1, seqlen_q < seqlen_k"),
    Shape(1, 1023, 113, 8, 1, note="MQA, seqlen_q > seqlen_k: causal rows that see no key"),
    Shape(3, 1, 1023, 8, 1, note="decode-like: one query"),
    Shape(2, 129, 65, 4, 2, pad=8, note="head dim below the kernel size: padded"),
)
SHAPES_QUICK = (SHAPES_FULL[1], SHAPES_FULL[4], SHAPES_FULL[5])
SHAPE_SETS = {"quick": SHAPES_QUICK, "full": SHAPES_FULL}

# The KV-cache calls of a decoding step, checked on every plain split-KV variant (both shape sets).
# Row b of a batch holds seqlen_k - seqlen_new - 97 b cached keys; rotary covers half the head dim.
# Page size 256 is a multiple of the split-KV key block at every head dim.
SPLITKV_CACHE_SHAPES = (
    Shape(3, 1, 1023, 16, 2, cache=CacheCase(1, "halves"), note="GQA 8:1 decode step: packed heads, rotary q"),
    Shape(2, 5, 700, 8, 2, cache=CacheCase(5, "interleaved"), note="5 new tokens, rotated at their positions"),
    Shape(3, 1, 1023, 8, 1, cache=CacheCase(page_size=256), note="paged cache, shuffled block table"),
    Shape(2, 3, 1023, 8, 2, cache=CacheCase(3, "interleaved", 256), note="append into a paged cache"),
)

# The feature checks: a few shapes each (the quick ones; with full, also one query over a long cache:
# sliding-window decoding), the window and softcap cases on every one of them.
FEATURE_SHAPE_SETS = {"quick": SHAPES_QUICK, "full": (*SHAPES_QUICK, SHAPES_FULL[6])}
SOFTCAP = 2.0  # standard-normal inputs give scores of +-3 and beyond: tanh visibly saturates
CAUSAL_WINDOWS = ((37, 0), (0, 0))  # causal sets right = 0: a window to the left, and the diagonal alone
WINDOWS = ((64, 32), (-1, 5), (37, -1), (0, 0))  # both sides, right only, left only, the diagonal alone


def feature_cases(variant: Variant) -> list[tuple[tuple[int, int], float]]:
    """(window_size, softcap) of every call a feature variant is checked with ([] for a plain one)."""
    cases: list[tuple[tuple[int, int], float]] = []
    windows = CAUSAL_WINDOWS if variant.causal else WINDOWS
    if "local" in variant.features:
        cases += [(window, 0.0) for window in windows]
    if "softcap" in variant.features:
        cases.append(((-1, -1), SOFTCAP))
    if "local" in variant.features and "softcap" in variant.features:
        cases.append((windows[0], SOFTCAP))
    return cases


def checks_for(variant: Variant, shapes: Iterable[Shape]) -> list[Shape]:
    """The checks of one variant: a plain variant runs on each shape (a split-KV one on the KV-cache
    shapes too); a feature variant runs each of its feature cases on each shape."""
    if not variant.features:
        return [*shapes, *(SPLITKV_CACHE_SHAPES if variant.direction == "splitkv" else ())]
    return [dataclasses.replace(s, window=window, softcap=softcap)
            for window, softcap in feature_cases(variant) for s in shapes]


def seed_for(seed: int, variant: Variant, shape: Shape) -> int:
    """A stable seed per (run seed, variant, shape): fresh inputs for every check, the same ones
    for the same --seed."""
    return zlib.crc32(f"{seed}:{variant.name}:{shape.label(variant)}".encode())


# ---------------------------------------------------------------- comparing one tensor

@dataclass
class Metric:
    tensor: str
    max_abs_err: float      # kernel vs fp32 reference (nan when the kernel wrote NaN)
    ref_err: float          # PyTorch in the input dtype vs fp32 reference
    tol: float              # TOLERANCE_FACTOR * ref_err + eps
    mismatch_pct: float     # share of elements past tol (NaN counts)
    reason: str | None = None  # why it fails; None when it passes

    @property
    def passed(self) -> bool:
        return self.reason is None

    @property
    def excess(self) -> float:
        """How far past its tolerance (inf for NaN): the worst tensor of a row has the largest."""
        if math.isnan(self.max_abs_err):
            return math.inf
        return self.max_abs_err / self.tol if self.tol > 0 else math.inf


def compare(name: str, got, ref, low, eps: float | None = None) -> Metric:
    """The correctness standard for one tensor: got (kernel), ref (fp32 reference), low (the same
    computation by PyTorch in the input dtype). Entries where ref is +inf (the lse of a row that
    sees no key) must be +inf in got too; the rest are compared."""
    import torch

    eps = eps_for(name) if eps is None else eps
    got, ref, low = got.float(), ref.float(), low.float()
    if got.shape != ref.shape:
        return Metric(name, math.nan, math.nan, math.nan, 100.0, f"shape {tuple(got.shape)} != {tuple(ref.shape)}")
    if got.numel() == 0:
        return Metric(name, 0.0, 0.0, eps, 0.0)
    if torch.isnan(ref).any():
        return Metric(name, math.nan, math.nan, math.nan, 100.0, "NaN in the fp32 reference (a reference bug)")
    hidden = torch.isposinf(ref)
    nan = torch.isnan(got)
    seen = ~hidden
    ref_err = _max_abs(low[seen] - ref[seen])
    if not math.isfinite(ref_err):  # an inf or NaN tolerance would pass any output
        return Metric(name, math.nan, ref_err, math.nan, 100.0,
                      "the yardstick (PyTorch in the input dtype) is not finite: no tolerance to hold the kernel to")
    tol = TOLERANCE_FACTOR * ref_err + eps
    diff = (got - ref).abs()
    diff[hidden] = 0.0
    bad = (diff > tol) | nan | (hidden & ~torch.isposinf(got)) | (seen & torch.isinf(got))
    mismatch = bad.float().mean().item() * 100
    if nan.any():
        return Metric(name, math.nan, ref_err, tol, mismatch, REASON_NAN)
    if (hidden != torch.isposinf(got)).any():
        return Metric(name, _max_abs(diff[seen]), ref_err, tol, mismatch,
                      "+inf rows differ (a row that sees no key has lse +inf, and only such a row)")
    err = _max_abs(diff[seen])
    if math.isinf(err):
        return Metric(name, err, ref_err, tol, mismatch, "inf")
    return Metric(name, err, ref_err, tol, mismatch, None if err <= tol else "error above tolerance")


def eps_for(name: str) -> float:
    """The eps of a tensor by its name (out, lse, dq, ...) or its kind (out, lse, grad)."""
    return EPS.get(name) or EPS[EPS_KIND.get(name, "out")]


def _max_abs(t) -> float:
    return t.abs().max().item() if t.numel() else 0.0


# ---------------------------------------------------------------- one check: a variant on a shape

@dataclass
class Row:
    variant: str
    shape: str
    metrics: list[Metric] = field(default_factory=list)
    error: str | None = None     # the call raised, or the sanitizer reported; fails the row
    skipped: str | None = None   # not run here (e.g. a kernel for another arch); neither pass nor fail

    @property
    def passed(self) -> bool:
        return self.skipped is None and self.error is None and all(m.passed for m in self.metrics)

    @property
    def worst(self) -> Metric | None:
        failing = [m for m in self.metrics if not m.passed]
        return max(failing or self.metrics, key=lambda m: m.excess, default=None)

    @property
    def status(self) -> str:
        return "skip" if self.skipped else "pass" if self.passed else "FAIL"

    @property
    def reason(self) -> str:
        if self.skipped:
            return self.skipped
        if self.error:
            return self.error
        worst = self.worst
        return "" if worst is None or worst.passed else f"{worst.tensor}: {worst.reason}"

    def to_json(self) -> dict[str, Any]:
        worst = self.worst
        return {"variant": self.variant, "shape": self.shape, "status": self.status, "passed": self.passed,
                "reason": self.reason, "worst": worst.tensor if worst else None,
                "error": self.error, "skipped": self.skipped,
                "metrics": [{**{k: _finite_or_text(v) for k, v in asdict(m).items()}, "passed": m.passed}
                            for m in self.metrics]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Row":
        metrics = [Metric(m["tensor"], float(m["max_abs_err"]), float(m["ref_err"]), float(m["tol"]),
                          float(m["mismatch_pct"]), m["reason"]) for m in data["metrics"]]
        return cls(data["variant"], data["shape"], metrics, data.get("error"), data.get("skipped"))


def _finite_or_text(value):
    """JSON has no NaN or inf: write them as "nan" / "inf" (float() reads them back)."""
    return str(value) if isinstance(value, float) and not math.isfinite(value) else value


def make_inputs(variant: Variant, shape: Shape, seed: int, device: str):
    """q, k, v (and dout) in the variant's dtype: standard normal from a per-check seed."""
    import torch

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[variant.dtype]
    gen = torch.Generator(device=device).manual_seed(seed_for(seed, variant, shape))
    d = shape.head_dim(variant)

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=torch.float32).to(dtype)

    q = randn(shape.batch, shape.seqlen_q, shape.nheads, d)
    k = randn(shape.batch, shape.seqlen_k, shape.nheads_k, d)
    v = randn(shape.batch, shape.seqlen_k, shape.nheads_k, d)
    dout = randn(shape.batch, shape.seqlen_q, shape.nheads, d)
    return q, k, v, dout


def poison(device: str, sizes: Iterable[int]) -> None:
    """Fill the caching allocator with NaN: free cached blocks, then allocate and free NaN blocks of
    the outputs' sizes (and one large block), so an output element the kernel does not write reads
    as NaN. Bytes 0xFF are NaN in fp16, bf16 and fp32 alike. A no-op off CUDA."""
    import torch

    if not str(device).startswith("cuda"):
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    blocks = [torch.empty(POISON_BLOCK_BYTES, dtype=torch.uint8, device=device)]
    blocks += [torch.empty(size, dtype=torch.uint8, device=device) for size in sizes for _ in range(POISON_COPIES)]
    for block in blocks:
        block.fill_(0xFF)
    torch.cuda.synchronize()
    del blocks


def _nbytes(*tensors) -> list[int]:
    return [t.numel() * t.element_size() for t in tensors]


def _check_forward(run, variant: Variant, shape: Shape, seed: int, device: str) -> list[Metric]:
    """out and lse of one forward call `run(q, k, v)` against the fp32 reference (fwd and splitkv)."""
    import torch
    from ..reference import attention_ref

    q, k, v, _ = make_inputs(variant, shape, seed, device)
    features = dict(window_size=shape.window, softcap=shape.softcap)
    ref, ref_lse = attention_ref(q, k, v, variant.causal, **features)
    low, low_lse = attention_ref(q, k, v, variant.causal, upcast=False, **features)
    lse_bytes = shape.batch * shape.nheads * shape.seqlen_q * 4
    padded = q.numel() // q.shape[-1] * variant.hdim * q.element_size()
    poison(device, [*_nbytes(q), padded, lse_bytes])
    out, lse = run(q, k, v)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    return [compare("out", out, ref, low), compare("lse", lse, ref_lse, low_lse)]


def check_fwd(module, variant: Variant, shape: Shape, seed: int, device: str) -> list[Metric]:
    return _check_forward(lambda q, k, v: module.flash_attn_func(q, k, v, causal=variant.causal, return_lse=True,
                                                                 **shape.feature_kwargs()),
                          variant, shape, seed, device)


def check_bwd(module, variant: Variant, shape: Shape, seed: int, device: str) -> list[Metric]:
    import torch
    from ..reference import attention_ref

    q, k, v, dout = make_inputs(variant, shape, seed, device)
    features = dict(window_size=shape.window, softcap=shape.softcap)
    leaves32 = [t.float().requires_grad_() for t in (q, k, v)]
    out32, lse32 = attention_ref(*leaves32, variant.causal, **features)
    grads32 = torch.autograd.grad(out32, leaves32, dout.float())
    leaves_low = [t.clone().requires_grad_() for t in (q, k, v)]
    out_low, _ = attention_ref(*leaves_low, variant.causal, upcast=False, **features)
    grads_low = torch.autograd.grad(out_low, leaves_low, dout)
    out, lse = out32.detach().to(q.dtype), lse32.detach()
    per_query_head = shape.batch * shape.seqlen_k * shape.nheads * variant.hdim * q.element_size()
    poison(device, [*_nbytes(q, k, v), per_query_head])
    dq, dk, dv = module.mha_bwd(dout, q, k, v, out, lse, causal=variant.causal, **shape.feature_kwargs())
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    return [compare(name, got, ref, low)
            for name, got, ref, low in zip(("dq", "dk", "dv"), (dq, dk, dv), grads32, grads_low)]


def check_splitkv(module, variant: Variant, shape: Shape, seed: int, device: str) -> list[Metric]:
    """Split-KV decoding over the whole cache, with SPLITKV_SPLITS splits forced so that the split
    forward and the combine both run on every shape (a window aligns to the cache's last key, as
    the causal mask does)."""
    return _check_forward(
        lambda q, k, v: module.mha_fwd_kvcache(q, k, v, causal=variant.causal, num_splits=SPLITKV_SPLITS,
                                               **shape.feature_kwargs()),
        variant, shape, seed, device)


def cache_inputs(variant: Variant, shape: Shape, seed: int, device: str) -> dict[str, Any]:
    """The KV-cache call of a CacheCase check, as mha_fwd_kvcache's keywords plus q: the cache (paged
    through a shuffled block table when asked), per-row lengths, new keys and values, and RoPE angles."""
    import torch

    case = shape.cache
    q, k_cache, v_cache, _ = make_inputs(variant, shape, seed, device)
    gen = torch.Generator(device=device).manual_seed(seed_for(seed, variant, shape) + 1)
    batch, capacity, nheads_k, head_dim = k_cache.shape
    lens = [max(0, capacity - case.seqlen_new - 97 * b) for b in range(batch)]
    per_row = -(-capacity // case.page_size) if case.page_size else 0
    positions = per_row * case.page_size or capacity  # a paged row holds whole pages
    call: dict[str, Any] = dict(q=q, cache_seqlens=torch.tensor(lens, dtype=torch.int32, device=device))
    if case.seqlen_new:
        new = [torch.randn(batch, case.seqlen_new, nheads_k, head_dim, generator=gen, device=device).to(q.dtype)
               for _ in range(2)]
        call.update(k=new[0], v=new[1])
    if case.rotary:
        rotary_dim = head_dim // 2
        inv_freq = 10000.0 ** (-torch.arange(0, rotary_dim, 2, device=device, dtype=torch.float64) / rotary_dim)
        angles = torch.arange(positions, device=device, dtype=torch.float64).view(-1, 1) * inv_freq
        call.update(rotary_cos=angles.cos().to(q.dtype), rotary_sin=angles.sin().to(q.dtype),
                    rotary_interleaved=case.rotary == "interleaved")
    if case.page_size:
        spare = 2  # pages no row uses: a read or write there is a bug
        table = torch.randperm(batch * per_row + spare, generator=gen, device=device)[:batch * per_row]
        pages = []
        for cache in (k_cache, v_cache):
            padded = torch.nn.functional.pad(cache, (0, 0, 0, 0, 0, per_row * case.page_size - capacity))
            paged = torch.randn(batch * per_row + spare, case.page_size, nheads_k, head_dim, generator=gen,
                                device=device).to(q.dtype)
            paged[table] = padded.reshape(batch * per_row, case.page_size, nheads_k, head_dim)
            pages.append(paged)
        k_cache, v_cache = pages
        call["block_table"] = table.view(batch, per_row).to(torch.int32)
    call.update(k_cache=k_cache, v_cache=v_cache)
    return call


def check_splitkv_cache(module, variant: Variant, shape: Shape, seed: int, device: str) -> list[Metric]:
    """A decoding step's KV-cache call (shape.cache) against flashbuild.reference.kvcache_ref: out,
    lse, and the whole k_cache and v_cache afterwards, whose fp32 reference holds the new keys
    rotated in fp32 (the kernel and PyTorch both round them to the cache's dtype)."""
    import torch
    from ..reference import apply_rotary, cache_slots, kvcache_ref

    call = cache_inputs(variant, shape, seed, device)
    q, k_cache, v_cache = call.pop("q"), call.pop("k_cache"), call.pop("v_cache")
    ref, ref_lse, low_k, low_v = kvcache_ref(q, k_cache, v_cache, causal=variant.causal, **call)
    low, low_lse, _, _ = kvcache_ref(q, k_cache, v_cache, causal=variant.causal, upcast=False, **call)
    ref_k, ref_v = low_k.float(), low_v.float()
    if "k" in call:
        positions = call["cache_seqlens"].long().view(-1, 1) + torch.arange(call["k"].shape[1], device=device)
        slots = cache_slots(positions, None, call.get("block_table"), k_cache.shape[1])
        new_k = call["k"].float()
        if "rotary_cos" in call:
            new_k = apply_rotary(call["k"], call["rotary_cos"], call["rotary_sin"], positions,
                                 call["rotary_interleaved"], dtype=torch.float32)
        ref_k[slots] = new_k
    k_cache, v_cache = k_cache.clone(), v_cache.clone()  # the call writes these
    lse_bytes = shape.batch * shape.nheads * shape.seqlen_q * 4
    poison(device, [*_nbytes(q), lse_bytes])
    out, lse = module.mha_fwd_kvcache(q, k_cache, v_cache, call.pop("cache_seqlens"), causal=variant.causal,
                                      num_splits=SPLITKV_SPLITS, **call)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    return [compare("out", out, ref, low), compare("lse", lse, ref_lse, low_lse),
            compare("k_cache", k_cache, ref_k, low_k), compare("v_cache", v_cache, ref_v, low_v)]


def check_splitkv_any(module, variant: Variant, shape: Shape, seed: int, device: str) -> list[Metric]:
    if shape.cache is not None:
        return check_splitkv_cache(module, variant, shape, seed, device)
    return check_splitkv(module, variant, shape, seed, device)


CHECKS: dict[str, Callable] = {"fwd": check_fwd, "bwd": check_bwd, "splitkv": check_splitkv_any}


def check(module, variant: Variant, shape: Shape, *, seed: int, device: str = "cuda") -> Row:
    """One row: the variant's outputs on this shape against the reference. A call that raises
    fails the row with the exception's first line (a VariantNotBuiltError too: the build's table
    says it holds this variant)."""
    row = Row(variant.name, shape.label(variant))
    run = CHECKS.get(variant.direction)
    if run is None:
        row.skipped = f"no check for direction {variant.direction} yet"
        return row
    # A tree's slice whose switches leave out the branch this call takes (adapters: FlashAttn3Slice.outside)
    outside = getattr(type(module), "outside", None)  # a method of the adapter's class, never a module attribute
    row.skipped = outside(module, variant, shape) if outside is not None else None
    if row.skipped:
        return row
    try:
        row.metrics = run(module, variant, shape, seed, device)
    except Exception as exc:  # noqa: BLE001 - any failure of the kernel call is this row's result
        row.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        # ... unless the tree's API chose, at runtime, a kernel the slice leaves out and the slice said so
        # in its own words (adapters: FlashAttn2Slice.outside_call): a skip naming why, not a failure
        outside_call = getattr(type(module), "outside_call", None)
        why = outside_call(module, variant, shape, exc) if outside_call is not None else None
        if why:
            row.skipped, row.error = why, None
    return row


# CUDA errors after which the context is unusable: every later call fails with the same error, so
# later rows say they were not run instead of repeating it.
STICKY_CUDA_ERRORS = ("illegal memory access", "unspecified launch failure", "misaligned address",
                      "illegal instruction", "device-side assert", "hardware stack error", "invalid program counter")


def lost_context(row: Row) -> bool:
    return bool(row.error) and any(pattern in row.error.lower() for pattern in STICKY_CUDA_ERRORS)


def run_checks(module, variants: list[Variant], shapes: Iterable[Shape], *, seed: int, device: str = "cuda",
               feature_shapes: Iterable[Shape] | None = None, skipped: Iterable[tuple[Variant, str]] = (),
               on_row: Callable[[Row], None] = lambda row: None,
               before: Callable[[Variant, Shape], None] = lambda v, s: None) -> list[Row]:
    """Every variant on its checks, in order: a plain variant on `shapes`, a feature variant's cases
    on `feature_shapes` (default: `shapes`); `skipped` variants get one skip row each. After a row
    that lost the CUDA context, the remaining rows are skips naming that row."""
    rows = []
    for variant, why in skipped:
        rows.append(Row(variant.name, "-", skipped=why))
        on_row(rows[-1])
    shapes = list(shapes)
    feature_shapes = shapes if feature_shapes is None else list(feature_shapes)
    lost: Row | None = None
    for variant in variants:
        for shape in checks_for(variant, feature_shapes if variant.features else shapes):
            if lost is not None:
                rows.append(Row(variant.name, shape.label(variant), skipped=(
                    f"not run: the CUDA context was lost at {lost.variant} {lost.shape}; rerun with --sanitize "
                    f"to locate the fault")))
            else:
                before(variant, shape)
                rows.append(check(module, variant, shape, seed=seed, device=device))
                lost = rows[-1] if lost_context(rows[-1]) else None
            on_row(rows[-1])
    return rows


# ---------------------------------------------------------------- reporting

COLUMNS = ("variant", "shape", "tensor", "max err", "ref err", "tol", "mismatch", "result")


def _num(x: float) -> str:
    return "nan" if math.isnan(x) else "inf" if math.isinf(x) else f"{x:.2e}"


SHAPE_WIDTH = 28


def shape_width(variants: Iterable[Variant], shapes: Iterable[Shape], feature_shapes: Iterable[Shape]) -> int:
    """The shape column's width for run_checks' rows (a feature check's label adds its window and softcap)."""
    shapes, feature_shapes = list(shapes), list(feature_shapes)
    return max([SHAPE_WIDTH] + [len(s.label(v)) for v in variants
                                for s in checks_for(v, feature_shapes if v.features else shapes)])


def table_header(variant_width: int = 30, shape_width: int = SHAPE_WIDTH) -> str:
    return (f"{'variant':<{variant_width}}  {'shape':<{shape_width}}  {'tensor':<6}  {'max err':>9}  {'ref err':>9}  "
            f"{'tol':>9}  {'mismatch':>8}  result")


def format_row(row: Row, variant_width: int = 30, shape_width: int = SHAPE_WIDTH) -> str:
    worst = row.worst
    if worst is None:
        numbers = f"{'-':<6}  {'-':>9}  {'-':>9}  {'-':>9}  {'-':>8}"
    else:
        numbers = (f"{worst.tensor:<6}  {_num(worst.max_abs_err):>9}  {_num(worst.ref_err):>9}  "
                   f"{_num(worst.tol):>9}  {worst.mismatch_pct:>7.3f}%")
    reason = f" ({row.reason})" if row.reason else ""
    return f"{row.variant:<{variant_width}}  {row.shape:<{shape_width}}  {numbers}  {row.status}{reason}"


def summary(rows: list[Row]) -> str:
    failed = [r for r in rows if r.status == "FAIL"]
    passed = sum(r.status == "pass" for r in rows)
    skipped = sum(r.status == "skip" for r in rows)
    variants = len({r.variant for r in rows})
    text = f"{passed} passed, {len(failed)} failed"
    if skipped:
        text += f", {skipped} skipped"
    return f"{text} ({len(rows)} checks of {variants} variant{'' if variants == 1 else 's'})"


def failure_message(rows: list[Row]) -> str:
    failed = [r for r in rows if r.status == "FAIL"]
    shown = "; ".join(f"{r.variant} {r.shape}: {r.reason}" for r in failed[:3])
    more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
    return f"{len(failed)} of {len(rows)} checks failed: {shown}{more}"


def verdict(rows: list[Row]) -> str | None:
    """Why the run fails, or None: a failed check, or no check that ran at all (every row skipped or
    none made): a run that checked nothing must not read as a pass."""
    if any(r.status == "FAIL" for r in rows):
        return failure_message(rows)
    if not any(r.status == "pass" for r in rows):
        reasons = sorted({r.reason for r in rows if r.skipped})
        why = f": {'; '.join(reasons[:3])}" if reasons else ""
        return f"nothing was checked ({len(rows)} checks, every one skipped{why}); run it on a GPU that runs the selection"
    return None


def results_json(rows: list[Row], **info: Any) -> str:
    return json.dumps({"format": JSON_FORMAT, "version": 1, **info, "passed": verdict(rows) is None,
                       "summary": summary(rows), "rows": [r.to_json() for r in rows]}, indent=2) + "\n"


def rows_from_json(text: str) -> list[Row]:
    return [Row.from_json(r) for r in json.loads(text)["rows"]]
