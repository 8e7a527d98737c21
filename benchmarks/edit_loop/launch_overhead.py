"""Host time per forward call at a size where the launch, not the kernel, is the cost: does a Hopper
kernel launched from its fatbin (a device-only kernel TU, kernels/common/kernel_library.h) cost the
caller more than one the launching TU compiled? Run once per tree, in turns (its own process and cache):

    FLASHBUILD_CACHE_DIR=/tmp/c python3 benchmarks/edit_loop/launch_overhead.py [--calls N] [--rounds R]

flash_attn_func on one 128-row sequence, 8 heads, hdim 64, fp16, non-causal (the Hopper kernel on
sm90): N calls queued back to back, then one synchronize; microseconds per call, R rounds (after a
warm-up), the minimum and median printed."""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import flashbuild


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    m = flashbuild.load(hdim=64, dtype="fp16", arch="native", direction="fwd", causal="off", features=[])
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    for _ in range(200):
        m.flash_attn_func(q, k, v)
    torch.cuda.synchronize()
    per_call = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.calls):
            m.flash_attn_func(q, k, v)
        torch.cuda.synchronize()
        per_call.append((time.perf_counter() - start) / args.calls * 1e6)
    print(f"us per call: min {min(per_call):.2f} median {statistics.median(per_call):.2f} "
          f"(rounds: {' '.join(f'{t:.2f}' for t in per_call)})")


if __name__ == "__main__":
    main()
