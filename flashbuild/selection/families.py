"""Kernel families and the table of which one serves each (direction, arch, head dim).

A family is one implementation strategy (the Ampere path, the Hopper family) with a launch header
per direction; the table is data, printed by the plan (`--dry-run`) and `flashbuild list`. The
template that instantiates a family's kernel picks its entry type from KernelTu.entry, never from
the variant's direction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import SelectionError
from .space import ARCHS, DIRECTIONS


@dataclass(frozen=True)
class KernelTu:
    """One TU of a variant that compiles one of its family's kernels alone, device-only (nvcc -fatbin):
    <variant>_<part>.cu, rendered from `template`, which includes `header` (the kernel's). `entry` names
    the kernel's entry type (templates/kernel_entry.j2: hopper_fwd, hopper_bwd, hopper_splitkv,
    hopper_splitkv_decode, ampere_splitkv), `label` the kernel in the plan ("the <label> of <variant> alone")."""

    part: str
    template: str
    header: str
    entry: str
    label: str = "kernel"
    # The variants that have this kernel (Variant.kernel_tus); None: every variant of the family and direction.
    only: Callable[..., bool] | None = field(default=None, compare=False)


# Hopper split-KV variants with a decode tile (keys in wgmma's M, a few query rows in N): head dims 64 and 128,
# kernels/hopper/splitkv_decode_traits.h's decode_tile_head_dim, which this rule mirrors.
def has_decode_tile(variant) -> bool:
    return variant.hdim in (64, 128)


# Hopper split-KV variants with the decode tile over pairs of K/V heads (the head-dim-128 tile over a head-dim-64 call):
# the plain non-causal variant of head dim 64, kernels/hopper/splitkv_decode_launch.h's kPairsVariant, which this rule
# mirrors.
def has_decode_pairs(variant) -> bool:
    return variant.hdim == 64 and not variant.causal and not variant.features


# Hopper forward variants whose main kernel takes 176-key tiles, and so keep a 128-key kernel of their own for
# paged caches and short keys: kernels/hopper/fwd_params.h's kWideKeys (the plain non-causal variant of head dim
# 128, fwd_traits.h: fwd_tile), which this rule mirrors (tests/test_compile_fwd_keys128.py compares the two).
def has_wide_keys(variant) -> bool:
    return variant.hdim == 128 and not variant.causal and not variant.features


@dataclass(frozen=True)
class Family:
    """A kernel family: one implementation strategy, with a launch header per direction. `kernel_tus`
    names, per direction, the TUs that compile the family's main kernels, each alone and device-only
    (Variant.kernel_tu): the variant's own TU keeps the dispatch and the launch, which reaches them
    through their fatbins, and they all build side by side.
    `small_kernels` names, per direction, the header that defines the launches of the small kernels every
    variant of one head dim and dtype shares (a backward's dsum and dQ conversion, split-KV's append and
    combine): one launch TU of each such group of a build compiles them (Variant.small_kernels_header), and
    the others link to it."""

    name: str
    summary: str
    launch_headers: dict[str, str] = field(hash=False)  # direction -> header under kernels/
    kernel_tus: dict[str, tuple[KernelTu, ...]] = field(default_factory=dict, hash=False)
    small_kernels: dict[str, str] = field(default_factory=dict, hash=False)  # direction -> header under kernels/


FAMILIES = {
    "ampere": Family("ampere", "mma.sync, ldmatrix, cp.async; runs on sm80 and newer",
                     {"fwd": "ampere/fwd_launch.h", "bwd": "ampere/bwd_launch.h",
                      "splitkv": "ampere/splitkv_launch.h"},
                     # Split-KV's forward kernel (one split or several); the append and combine kernels stay in
                     # the launch TU.
                     {"splitkv": (KernelTu("kernel", "splitkv_kernel.cu.j2", "ampere/fwd_kernel.h", "ampere_splitkv",
                                           "split-KV kernel"),)}),
    "hopper": Family("hopper", "wgmma, TMA, a warp-specialized producer and consumer warpgroups (the forward: "
                               "ping-pong consumers, persistent scheduler); sm_90a",
                     {"fwd": "hopper/fwd_launch.h", "bwd": "hopper/bwd_launch.h",
                      "splitkv": "hopper/splitkv_launch.h"},
                     # The forward's main kernel, and where that takes 176-key tiles its 128-key one; the
                     # backward's main kernel and its deterministic (ordered) instantiation. Split-KV: the
                     # forward kernel compiled for decoding.
                     {"fwd": (KernelTu("kernel", "fwd_kernel.cu.j2", "hopper/fwd_kernel.h", "hopper_fwd"),
                              KernelTu("kernel_keys128", "fwd_kernel.cu.j2", "hopper/fwd_kernel.h", "hopper_fwd",
                                       "128-key kernel (paged caches, short keys)", only=has_wide_keys)),
                      "splitkv": (KernelTu("kernel", "splitkv_kernel.cu.j2", "hopper/fwd_kernel.h", "hopper_splitkv",
                                           "split-KV kernel"),
                                  KernelTu("kernel_decode", "splitkv_kernel.cu.j2", "hopper/splitkv_decode_kernel.h",
                                           "hopper_splitkv_decode", "split-KV decode tile (few query rows)",
                                           only=has_decode_tile),
                                  KernelTu("kernel_decode_pairs", "splitkv_kernel.cu.j2",
                                           "hopper/splitkv_decode_kernel.h", "hopper_splitkv_decode_pairs",
                                           "split-KV decode tile over pairs of K/V heads", only=has_decode_pairs)),
                      "bwd": (KernelTu("kernel", "bwd_kernel.cu.j2", "hopper/bwd_kernel.h", "hopper_bwd"),
                              KernelTu("kernel_ordered", "bwd_kernel.cu.j2", "hopper/bwd_kernel.h", "hopper_bwd",
                                       "deterministic (ordered) kernel"))},
                     # The backward's dsum (rowsum(dO * O)) and dQ conversion; split-KV's append and combine.
                     {"bwd": "hopper/bwd_small_kernels.h", "splitkv": "hopper/splitkv_small_kernels.h"}),
}

# Which family serves (direction, arch), and the head dims another family serves there (HEAD_DIM_FAMILY). The
# Hopper family has a forward, a backward and a split-KV (the forward kernel compiled for decoding) for sm_90a. A
# Hopper variant compiles no Ampere-path kernel: the binding copies tensors TMA cannot address into aligned ones and
# answers calls without queries or keys itself (kernels/binding/flash_api.cpp). FAMILY_NOTES says who serves what in
# the plan.
FAMILY_TABLE = {
    (direction, arch): "ampere" for direction in DIRECTIONS for arch in ARCHS
} | {("fwd", "sm90"): "hopper", ("bwd", "sm90"): "hopper", ("splitkv", "sm90"): "hopper"}
FAMILY_NOTES = {
    ("bwd", "sm90"): "local windows and softcap (the feature TUs), packed (varlen) and deterministic calls run on "
                     "the Hopper kernel",
    ("splitkv", "sm90"): "the Hopper forward kernel compiled for decoding (64-row tiles, splits, the cache's "
                         "addressing), and at head dims 64 and 128 a decode tile for calls of at most 8 query rows "
                         "a block (keys in wgmma's M); cache calls of 128 queries or more with nothing to append or rotate, "
                         "contiguous or paged at head dims 32-128, run on the forward variant's Hopper kernel when "
                         "the build holds it",
    ("fwd", "sm90"): "packed (varlen) calls and prefill-sized KV-cache chunks (paged at head dims 32-128) run on "
                     "the Hopper kernel; one-row GQA/MQA calls of more than one wave take one block per K/V head",
}
# (direction, arch, head dim) -> (the family that serves it, why), where that is not FAMILY_TABLE's: the variant is
# then that family's in every respect (its launch header, kernel TUs, small kernels), and the plan says why.
HEAD_DIM_FAMILY = {
    ("bwd", "sm90", hdim): ("ampere", f"head dim {hdim} has no Hopper backward tile: the Ampere-path kernel compiled "
                                      f"for sm_90a") for hdim in (32,)
} | {
    ("splitkv", "sm90", hdim): ("ampere", f"head dim {hdim}: the Ampere-path split-KV compiled for sm_90a (the Hopper "
                                          f"key block of this head dim, {block} rows, does not divide every page size the "
                                          f"binding accepts: multiples of 64 rows)") for hdim, block in ((192, 96), (256, 80))
}
HEAD_DIM_NOTES = {key: note for key, (_, note) in HEAD_DIM_FAMILY.items()}


def family_note(direction: str, arch: str, hdim: int) -> str | None:
    """What the plan and `list` say about who serves this variant, beyond its family's name."""
    return HEAD_DIM_NOTES.get((direction, arch, hdim)) or FAMILY_NOTES.get((direction, arch))


def implemented_directions() -> tuple[str, ...]:
    return tuple(d for d in DIRECTIONS if any(key[0] == d for key in FAMILY_TABLE))


def family_for(direction: str, arch: str) -> Family:
    name = FAMILY_TABLE.get((direction, arch))
    if name is None:
        archs = [a for (d, a) in FAMILY_TABLE if d == direction]
        if not archs:
            raise SelectionError(
                f"direction {direction}: no kernel family implements it yet "
                f"(implemented: {', '.join(implemented_directions())}); use --direction "
                f"{','.join(implemented_directions())}")
        raise SelectionError(
            f"direction {direction} on {arch}: no kernel family implements it "
            f"(implemented for: {', '.join(archs)}); use --arch {','.join(archs)}")
    return FAMILIES[name]

