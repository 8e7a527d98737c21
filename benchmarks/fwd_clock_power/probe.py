"""Issue 46: at the clocks the card picks itself, do our forward and FA3's run at the same SM clock and power? Each
forward call in a loop for --seconds, ours and FA3's (hopper/ through the flash-attn-3 profile with its cluster
switch) in turns, the order flipped each round, while a thread reads the SM clock, the board power and the clock
limit reasons through NVML (nvidia-smi's lines if pynvml is missing) every 10 ms. Per window: TFLOPS by CUDA events
around the window's calls, the mean SM clock and power of its samples (the first 0.25 s left out), TFLOPS per GHz
(the work a clock tick does, which the clock leaves out) and joules a call. Issue 46's shape: 16k tokens, model dim
2048 (heads 2048 / hdim, rounded down), fp16, two input sets rotated (each larger than twice the L2), random normal
inputs. --direction bwd times mha_bwd instead, on each arm's own forward's out and lse (first run in h200-8).
Arms (--arms):
  ours           this tree's forward (its causal calls with FLASHBUILD_HOPPER_FWD_PAIRS unset: the tree's default)
  ours@SETTING   the same build, its causal calls with FLASHBUILD_HOPPER_FWD_PAIRS=SETTING (kernels/hopper/fwd_pairs.h)
  ours-pairs     ours@all:2: pairs of query blocks at every length, two rounds left to the tail (h200-3, h200-4: the
                 default was `short` then, so `ours` was short there)
  ours-pairs4    ours@all:4
  ours-nomc      the same build with FLASHBUILD_HOPPER_FWD_KV_MULTICAST=off: its calls on one CTA a K/V box
                 (kernels/hopper/fwd_kv_multicast.h; ../fwd_kv_multicast/)
  ours-base      a build with -DFLASHBUILD_HOPPER_FWD_MULTICAST_KERNELS=0: the kernels without K/V multicast
  fa3            FA3's forward with its cluster kernels (the bench's build)
  fa3-nocluster  FA3's forward built without them (its non-causal hdim >= 128 calls run the 1-CTA kernel)
  sdpa-cudnn      PyTorch SDPA's cuDNN backend on the same inputs, transposed to its layout (--direction fwd; added
                 after h200-7, not yet run)
The ratio columns are each arm's against the first arm. One process loads one FA3 build (a second registered the
same torch library and aborted the process, h200-2; flashbuild now refuses it by name), so fa3 and fa3-nocluster run
in separate probes (run.sh's ARMS2).

    python3 benchmarks/fwd_clock_power/probe.py --out OUT [--name probe] [--arms ours,fa3] [--hdims 128,256]
        [--causal off,on] [--seqlens 16384] [--seconds 1.5] [--rounds 3] [--turn-reps 0]
        [--tree /tmp/fa3/flash-attention-0251105a] [--direction fwd|bwd]
"""
from __future__ import annotations

import sys

if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import threading
import time

import torch

import flashbuild

_DRIVE = pathlib.Path(__file__).resolve().parent.parent / "bwd_ncu_fa3" / "drive.py"
_spec = importlib.util.spec_from_file_location("bwd_ncu_fa3_drive", _DRIVE)
drive = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drive)

POWER_CAP_REASONS = 0x4 | 0x80  # NVML's SW power cap and HW power brake


class _SdpaCudnn:
    """SDPA's cuDNN backend behind the forward call the arms make. The inputs are (batch, seqlen, heads, hdim); each
    input set is copied once into SDPA's (batch, heads, seqlen, hdim), as flashbuild bench does, and the copy
    reused by every later call on that set."""

    def __init__(self):
        self.copies = {}

    def flash_attn_func(self, q, k, v, causal=False):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape))
        if key not in self.copies:
            if len(self.copies) >= 2:  # a new case's sets: the last case's copies go
                self.copies.clear()
            self.copies[key] = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(*self.copies[key], is_causal=causal).transpose(1, 2)


class Sampler(threading.Thread):
    """(time, SM MHz, watts, power-capped) every 10 ms until stop()."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.running, self.source = [], True, "nvml"
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception:  # no pynvml: nvidia-smi's lines, stamped as they arrive
            self.nvml, self.source = None, "nvidia-smi"

    def run(self):
        if self.nvml:
            n, h = self.nvml, self.handle
            reasons_of = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                n.nvmlDeviceGetCurrentClocksThrottleReasons
            while self.running:
                reasons = reasons_of(h)
                self.samples.append((time.time(), n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                                     n.nvmlDeviceGetPowerUsage(h) / 1000, bool(reasons & POWER_CAP_REASONS)))
                time.sleep(0.01)
            return
        proc = subprocess.Popen(["stdbuf", "-oL", "nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                                 "--format=csv,noheader,nounits", "-lms", "10"],
                                stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            if not self.running:
                break
            try:
                mhz, watts = (float(x) for x in line.split(","))
                self.samples.append((time.time(), mhz, watts, False))  # the limit reasons: NVML only
            except ValueError:
                continue
        proc.terminate()

    def stop(self):
        self.running = False

    def window(self, start, end):
        return [s for s in self.samples if start + 0.25 <= s[0] <= end]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", default="probe", help="the results' file name, NAME.json")
    parser.add_argument("--arms", default="ours,fa3")
    parser.add_argument("--hdims", default="128,256")
    parser.add_argument("--causal", default="off,on")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seqlens", default="16384", help="batch 16384 / seqlen")
    parser.add_argument("--turn-reps", type=int, default=0,
                        help="then this many rounds of one call of each arm, in turns (flashbuild bench's protocol)")
    parser.add_argument("--tree", default="/tmp/fa3/flash-attention-0251105a")
    parser.add_argument("--direction", choices=["fwd", "bwd"], default="fwd",
                        help="bwd: time mha_bwd (each arm's own forward's out and lse), 2.5x the forward's FLOPs")
    args = parser.parse_args()
    bwd = args.direction == "bwd"
    direction = "fwd,bwd" if bwd else "fwd"
    hdims = [int(h) for h in args.hdims.split(",")]
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arms = args.arms.split(",")
    builds = {"ours": lambda: flashbuild.load(hdim=args.hdims, dtype="fp16", arch="native", direction=direction,
                                              causal="both", features=[]),
              "fa3": lambda: drive.fa3(args.tree, args.hdims, direction),
              "fa3-nocluster": lambda: drive.fa3(args.tree, args.hdims, direction, features="none")}
    builds["sdpa-cudnn"] = lambda: _SdpaCudnn()
    builds["ours-base"] = lambda: flashbuild.load(hdim=args.hdims, dtype="fp16", arch="native", direction=direction,
                                                  causal="both", features=[],
                                                  nvcc_flags=["-DFLASHBUILD_HOPPER_FWD_MULTICAST_KERNELS=0"])
    if bwd and "sdpa-cudnn" in arms:
        sys.exit("probe.py: the sdpa-cudnn arm times the forward alone (--direction fwd)")
    aliases = {"ours-pairs": "ours@all:2", "ours-pairs4": "ours@all:4"}
    # The environment each arm's calls run with (the same build as ours).
    env = {arm: ({"FLASHBUILD_HOPPER_FWD_PAIRS": aliases.get(arm, arm).partition("@")[2]}
                 if arm.startswith("ours@") or arm in aliases else {}) for arm in arms}
    if "ours-nomc" in arms:
        env["ours-nomc"] = {"FLASHBUILD_HOPPER_FWD_KV_MULTICAST": "off"}
    for arm in arms:
        if arm.startswith("ours@") or arm in aliases or arm == "ours-nomc":
            builds[arm] = builds["ours"]
    unknown = [a for a in arms if a not in builds]
    if unknown:
        sys.exit(f"probe.py: no arm {', '.join(unknown)}; the arms are {', '.join(builds)}")
    if {"fa3", "fa3-nocluster"} <= set(arms):
        sys.exit("probe.py: fa3 and fa3-nocluster are two builds of FA3's _C: one of them a process (run.sh's ARMS2)")
    exts = {}
    for arm in arms:
        exts[arm] = next((exts[a] for a in exts if builds[a] is builds[arm]), None) or builds[arm]()
    cases = [(s, h, c == "on") for s in map(int, args.seqlens.split(",")) for h in hdims
             for c in args.causal.split(",")]
    sampler = Sampler()
    sampler.start()
    rows, turns = [], []

    def call(who, x, causal):
        """One forward call on x["qkv"], or with --direction bwd one mha_bwd with x["dout"] and the arm's own out
        and lse (x[who]); the output, or dQ."""
        os.environ.update(env[who])
        try:
            if bwd:
                o = exts[who].mha_bwd(x["dout"], *x["qkv"], *x[who], causal=causal)
            else:
                o = exts[who].flash_attn_func(*x["qkv"], causal=causal)
        finally:
            for name in env[who]:
                os.environ.pop(name, None)
        return o[0] if isinstance(o, (tuple, list)) else o

    for seqlen, hdim, causal in cases:
        torch.manual_seed(0)
        shape = (16384 // seqlen, seqlen, 2048 // hdim, hdim)
        sets = []
        for _ in range(2):
            x = {"qkv": [torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3)]}
            if bwd:  # each arm's own forward: out and lse as that arm's backward takes them
                x["dout"] = torch.randn(shape, device="cuda", dtype=torch.float16)
                for who in arms:
                    x[who] = exts[who].flash_attn_func(*x["qkv"], causal=causal, return_lse=True)
            sets.append(x)
        flops = 4 * 16384 * seqlen * shape[2] * hdim / (2 if causal else 1) * (2.5 if bwd else 1)
        case = dict(seqlen=seqlen, hdim=hdim, causal=causal, direction=args.direction)
        ref = call(arms[0], sets[0], causal).float()
        for who in arms:  # warm-up, and each arm's output (dQ) compared with the first's once
            err = (call(who, sets[0], causal).float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-6)
            assert err < 2e-2, f"{who} disagrees with {arms[0]} by {err:.2e} of its largest value: {case}"
        for r in range(args.rounds):
            for who in (arms if r % 2 == 0 else arms[::-1]):
                torch.cuda.synchronize()
                start_t = time.time()
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                calls = 0
                while time.time() - start_t < args.seconds:
                    for _ in range(8):
                        call(who, sets[calls % 2], causal)
                        calls += 1
                    torch.cuda.synchronize()
                end.record()
                torch.cuda.synchronize()
                end_t = time.time()
                ms = begin.elapsed_time(end)
                win = sampler.window(start_t, end_t)
                mhz = statistics.mean(s[1] for s in win) if win else float("nan")
                watts = statistics.mean(s[2] for s in win) if win else float("nan")
                tflops = flops * calls / (ms / 1e3) / 1e12
                rows.append(dict(case, who=who, round=r, calls=calls, ms=ms, tflops=tflops, mhz=mhz, watts=watts,
                                 capped=sum(s[3] for s in win) / max(len(win), 1), samples=len(win),
                                 tflops_per_ghz=tflops / (mhz / 1e3), joules_per_call=watts * ms / 1e3 / calls))
                print(json.dumps(rows[-1]))
        if args.turn_reps:  # flashbuild bench's protocol: one call of each arm a round, each between two events
            events = {who: [] for who in arms}
            for i in range(args.turn_reps):
                for who in arms:
                    b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    b.record()
                    call(who, sets[i % 2], causal)
                    e.record()
                    events[who].append((b, e))
            torch.cuda.synchronize()
            for who in arms:
                ms = statistics.median(b.elapsed_time(e) for b, e in events[who])
                turns.append(dict(case, who=who, ms=ms, tflops=flops / (ms / 1e3) / 1e12))
    sampler.stop()
    (out / f"{args.name}.json").write_text(json.dumps(dict(source=sampler.source, rows=rows, turns=turns), indent=1))
    print(f"\n{args.direction}; samples from {sampler.source}; medians over {args.rounds} rounds of {args.seconds} s "
          "an arm"
          + (f"; in turns: {args.turn_reps} rounds of one call an arm" if turns else ""))
    print("| seqlen | hdim | causal | who | TFLOPS | SM MHz | W | power-capped | TFLOPS/GHz | mJ/call | "
          f"TFLOPS / {arms[0]}'s | per GHz / {arms[0]}'s | in turns / {arms[0]}'s |")
    print("| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for seqlen, hdim, causal in cases:
        med, turn = {}, {}
        for who in arms:
            sel = [x for x in rows if (x["seqlen"], x["hdim"], x["causal"], x["who"]) == (seqlen, hdim, causal, who)]
            med[who] = {k: statistics.median(x[k] for x in sel)
                        for k in ("tflops", "mhz", "watts", "capped", "tflops_per_ghz", "joules_per_call")}
            turn[who] = next((x["tflops"] for x in turns
                              if (x["seqlen"], x["hdim"], x["causal"], x["who"]) == (seqlen, hdim, causal, who)), None)
        for who in arms:
            m, first = med[who], med[arms[0]]
            in_turns = f"{turn[who] / turn[arms[0]]:.3f}" if turn[who] else "-"
            print(f"| {seqlen} | {hdim} | {'yes' if causal else 'no'} | {who} | {m['tflops']:.1f} | {m['mhz']:.0f} | "
                  f"{m['watts']:.0f} | {m['capped']:.2f} | {m['tflops_per_ghz']:.1f} | "
                  f"{m['joules_per_call'] * 1e3:.2f} | {m['tflops'] / first['tflops']:.3f} | "
                  f"{m['tflops_per_ghz'] / first['tflops_per_ghz']:.3f} | {in_turns} |")


if __name__ == "__main__":
    main()
