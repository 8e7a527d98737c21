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
# A split sm90 variant's two TUs (Unit.kind '<direction>/family', '<direction>/fallback'), each as a share
# of the one TU that held both: benchmarks/edit_loop/README.md, fwd_hdim64_fp16_causal_sm90 and
# bwd_hdim64_fp16_sm90 on the 2-core machine (nvcc --time totals, mean of 2 runs).
SPLIT_SHARE = {"fwd/family": 0.54, "fwd/fallback": 0.65, "bwd/family": 0.38, "bwd/fallback": 0.78}
# A forward variant whose Hopper kernel compiles device-only: the family TU's share split as its two
# replacements measured against it (2-core machine, fwd_hdim64_fp16_sm90, one compile at a time, mean of 3
# rounds: the one TU 16.14 s, the kernel TU (-fatbin) 8.71 s, the launch TU 7.56 s;
# benchmarks/edit_loop/results/2core-device-only.txt).
SPLIT_SHARE |= {"fwd/kernel": 0.54 * 8.71 / 16.14, "fwd/launch": 0.54 * 7.56 / 16.14}
# The Hopper backward's family TU split the same way (2-core machine, bwd_hdim64_fp16_sm90, one build of 2 jobs:
# the launch TU with its small kernels 12.6 s, each main kernel's TU 10.0 s, against ~22 s for the one TU).
SPLIT_SHARE |= {"bwd/launch": 0.38 * 12.6 / 22.0, "bwd/kernel": 0.38 * 10.0 / 22.0,
                "bwd/kernel_ordered": 0.38 * 10.0 / 22.0}


def estimate(unit: Unit) -> float:
    return ESTIMATE_SECONDS.get(unit.direction, max(ESTIMATE_SECONDS.values())) * SPLIT_SHARE.get(unit.kind, 1.0) * \
        (FEATURE_FACTOR if unit.features else 1.0)


def longest_first(units: tuple[Unit, ...]) -> list[Unit]:
    """The units by estimated cost, longest first; equal estimates keep their order."""
    return sorted(units, key=lambda u: -estimate(u))
