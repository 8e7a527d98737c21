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
# An sm90 Hopper variant's TUs (Unit.kind '<direction>/launch', '<direction>/<kernel part>'), each as a share of
# the one TU that held the variant's Hopper kernel with its launch, itself measured as a share of the TU that
# held the Ampere-path kernel too (fwd 0.54, bwd 0.38: benchmarks/edit_loop/README.md, fwd_hdim64_fp16_causal_sm90
# and bwd_hdim64_fp16_sm90 on the 2-core machine, nvcc --time totals, mean of 2 runs). The forward's split:
# fwd_hdim64_fp16_sm90, one compile at a time, mean of 3 rounds: the one TU 16.14 s, the kernel TU (-fatbin)
# 8.71 s, the launch TU 7.56 s (benchmarks/edit_loop/results/2core-device-only.txt). The backward's: one build of
# 2 jobs, the launch TU with its small kernels 12.6 s, each main kernel's TU 10.0 s, against ~22 s for the one TU.
HOPPER_SHARE = {"fwd": 0.54, "bwd": 0.38}
SPLIT_SHARE = {"fwd/kernel": HOPPER_SHARE["fwd"] * 8.71 / 16.14, "fwd/launch": HOPPER_SHARE["fwd"] * 7.56 / 16.14,
               "bwd/launch": HOPPER_SHARE["bwd"] * 12.6 / 22.0, "bwd/kernel": HOPPER_SHARE["bwd"] * 10.0 / 22.0,
               "bwd/kernel_ordered": HOPPER_SHARE["bwd"] * 10.0 / 22.0}
# A split-KV variant's TUs, as shares of the one TU that held its forward kernels (then two: one split, several)
# with the launch (2-core machine, splitkv_hdim64_fp16_sm90, one job, one round each, the machine otherwise idle:
# that TU 32.2 s at 3a15410; now the kernel's TU 21.7 s, the launch TU 9.7 s).
SPLIT_SHARE |= {"splitkv/kernel": 21.7 / 32.2, "splitkv/launch": 9.7 / 32.2}


def estimate(unit: Unit) -> float:
    return ESTIMATE_SECONDS.get(unit.direction, max(ESTIMATE_SECONDS.values())) * SPLIT_SHARE.get(unit.kind, 1.0) * \
        (FEATURE_FACTOR if unit.features else 1.0)


def longest_first(units: tuple[Unit, ...]) -> list[Unit]:
    """The units by estimated cost, longest first; equal estimates keep their order."""
    return sorted(units, key=lambda u: -estimate(u))
