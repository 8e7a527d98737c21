"""Diagnostics for the hdim-256 non-causal forward at b16 s1024 h8 (benchmarks/fwd_persistent/README.md), from
the repository root on the nvidia-h200 machine:
  timing > tm.txt: four calls of a build with per-CTA clock64/globaltimer prints. Needs benchmarks/archive/tried/fwd_persistent--timing.diff (out of the tree: git show 75f2c05:benchmarks/archive/tried/fwd_persistent--timing.diff | git apply)
    applied to kernels/ampere/fwd_kernel.h as of commit d8c335d (before the persistent forward).
  parse tm.txt: the prologue and epilogue shares of a CTA, from those prints
  clocks: ours and FA2 in 3-s loops, alternating, with nvidia-smi sampling SM clock and power"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import sys, time, subprocess, statistics, collections
mode = sys.argv[1]
if mode == "parse":
    rows = [l.split()[1:] for l in open(sys.argv[2]) if l.startswith("TM ")]
    rows = [tuple(int(x) for x in r) for r in rows]
    last = rows[-1024:]
    sm = collections.defaultdict(list)
    for r in last: sm[r[0]].append(r)
    g0 = min(r[8] for r in last); g1 = max(r[9] for r in last)
    span = g1 - g0
    dur = [r[9]-r[8] for r in last]; cyc = [r[7]-r[4] for r in last]
    pro = [(r[5]-r[4])/(r[7]-r[4]) for r in last]; epi = [(r[7]-r[6])/(r[7]-r[4]) for r in last]
    gaps = []; tail = 0; head = 0
    for s, rs in sm.items():
        rs.sort(key=lambda r: r[8])
        gaps += [b[8]-a[9] for a, b in zip(rs, rs[1:])]
        tail += g1 - rs[-1][9]; head += rs[0][8] - g0
    nsm = len(sm)
    print(f"kernel span {span/1e3:.1f} us on {nsm} SMs; CTA median {statistics.median(dur)/1e3:.2f} us, "
          f"{statistics.median(cyc)} cycles -> {statistics.median(cyc)/statistics.median(dur):.3f} GHz")
    print(f"prologue (start -> Q,K landed) median {100*statistics.median(pro):.1f}% of a CTA, "
          f"epilogue (after loop) {100*statistics.median(epi):.1f}%")
    print(f"gap between CTAs on one SM: median {statistics.median(gaps):.0f} ns, max {max(gaps)} ns")
    print(f"idle SM time: head {100*head/(nsm*span):.1f}%, tail {100*tail/(nsm*span):.1f}%, "
          f"gaps {100*sum(gaps)/(nsm*span):.1f}% of {nsm} x span")
    print("CTAs per SM:", sorted(collections.Counter(len(v) for v in sm.values()).items()))
    sys.exit()

import torch, flashbuild
from torch.nn.attention import sdpa_kernel, SDPBackend
b, s, h, d = 16, 1024, 8, 256
flops = 4 * b * h * s * s * d
if mode == "timing":
    m = flashbuild.load(hdim=[256], dtype=["bf16"], arch="sm90", direction=["fwd"], causal="off", features=[],
                        nvcc_flags=["-DFLASHBUILD_AB_TIMING"])
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for _ in range(4): m.flash_attn_func(q, k, v)
    torch.cuda.synchronize()
    sys.exit()

m = flashbuild.load(hdim=[256], dtype=["fp16", "bf16"], arch="sm90", direction=["fwd"], causal="off", features=[])
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                        "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
time.sleep(1)
windows = []
for dtype in (torch.bfloat16, torch.half):
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    def fa2():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)
    runs = {"ours": lambda: m.flash_attn_func(q, k, v), "fa2": fa2}
    for rnd in range(2):
        for name, fn in runs.items():
            for _ in range(5): fn()
            torch.cuda.synchronize()
            t0 = time.time(); e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
            n = 0; e0.record()
            while time.time() - t0 < 3.0:
                for _ in range(20): fn()
                n += 20
                torch.cuda.synchronize()
            e1.record(); torch.cuda.synchronize(); t1 = time.time()
            windows.append((str(dtype)[6:], name, rnd, t0 + 0.5, t1, flops * n / (e0.elapsed_time(e1) * 1e-3) / 1e12))
            time.sleep(1.0)
smi.terminate(); out = smi.communicate()[0]
samples = []
import datetime
for line in out.strip().splitlines():
    ts, clk, pw, tmp = [x.strip() for x in line.split(",")]
    t = datetime.datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f").timestamp()
    samples.append((t, float(clk), float(pw), float(tmp)))
print("dtype kernel round TFLOPS  sm_clock_MHz(median)  power_W(median)  temp_C")
for dt, name, rnd, a, z, tf in windows:
    sel = [x for x in samples if a <= x[0] <= z]
    c = statistics.median(x[1] for x in sel) if sel else float("nan")
    p = statistics.median(x[2] for x in sel) if sel else float("nan")
    T = statistics.median(x[3] for x in sel) if sel else float("nan")
    print(f"{dt:9s} {name:5s} {rnd} {tf:7.1f} {c:8.0f} {p:8.1f} {T:5.0f}")
