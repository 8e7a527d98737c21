"""What a TU costs to compile, estimated before any build of it: the order of a cold build's edges
(longest first, so the long TUs do not start last) and a shard split without a .ninja_log to go by."""

from __future__ import annotations

from ..sources.units import Unit

# Seconds per TU on one core of the 2-core dev machine, the mean of every TU measured in
# benchmarks/build_cost/README.md (fp16, causal, sm86/sm90, hdim 64-256): fwd 39.4 s (10 TUs),
# splitkv 40.7 s (6), bwd 54.5 s (10). A TU with features compiled in took 1.03x its plain twin on
# average (13 pairs; 0.90x to 1.49x). Head dim is not modelled: its spread within a kind was smaller
# than the machine's noise. Only ratios matter; the seconds are printed as estimates.
ESTIMATE_SECONDS = {"fwd": 39.4, "splitkv": 40.7, "bwd": 54.5}
FEATURE_FACTOR = 1.03
# The Ampere path's split-KV variant: the forward kernel (one split or several) device-only in a TU of its own, the
# launch with the append and combine kernels in the variant's TU; shares of the one TU that held them all
# (2-core machine, splitkv_hdim64_fp16_sm90, one job, the machine otherwise idle: that TU 32.2 s at 3a15410; the
# kernel's TU 21.7 s, the launch TU 9.7 s).
SPLIT_SHARE = {"splitkv/kernel": 21.7 / 32.2, "splitkv/launch": 9.7 / 32.2}
# The Hopper family's TUs (Unit.kind), measured in one build: the cold main job at 2 jobs on the 2-core machine
# (benchmarks/edit_loop/README.md, "The small kernels once per head dim and dtype"), the mean of each kind's plain
# and feature TUs. The split-KV kernel is the forward's compiled for decoding; a launch TU that compiles its group's
# small kernels (Unit.compiles_small_kernels: dsum and the dQ conversion, or append and combine) takes 12.5 s, one
# whose group compiles them elsewhere is host code alone, as the forward's.
# The forward's 128-key kernel (a variant with 176-key tiles: selection/families.py) is the forward's kernel.
# The split-KV's decode tile (selection/families.py: has_decode_tile) and its pairs of K/V heads (has_decode_pairs) not
# timed alone; taken as the split-KV kernel's.
HOPPER_SECONDS = {"fwd/kernel": 8.9, "fwd/kernel_keys128": 8.9, "fwd/launch": 7.9, "splitkv/kernel": 8.9,
                  "splitkv/kernel_decode": 8.9, "splitkv/kernel_decode_pairs": 8.9,
                  "bwd/kernel": 10.0, "bwd/kernel_ordered": 9.8, "small kernels": 12.5, "host code alone": 7.7}


def estimate(unit: Unit) -> float:
    kind = unit.kind
    if unit.variant is not None and unit.variant.family.name == "hopper" and unit.variant.kernel_tu:
        if unit.small_kernels_host:
            kind = "small kernels" if unit.compiles_small_kernels else "host code alone"
        seconds = HOPPER_SECONDS[kind]
    else:
        seconds = ESTIMATE_SECONDS.get(unit.direction, max(ESTIMATE_SECONDS.values())) * SPLIT_SHARE.get(kind, 1.0)
    return seconds * (FEATURE_FACTOR if unit.features else 1.0)


def longest_first(units: tuple[Unit, ...]) -> list[Unit]:
    """The units by estimated cost, longest first; equal estimates keep their order."""
    return sorted(units, key=lambda u: -estimate(u))
