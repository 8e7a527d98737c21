"""The deterministic backward's routing in one short device call (the feature kernel holds the mode):
a backward-only build with softcap compiled in (3 kernel TUs), out and lse from the fp32 reference (no forward TU),
then mha_bwd with deterministic=True three times (bits must be identical), against the fp32 reference
by the correctness rule (docs/correctness.md), and the same data through mha_varlen_bwd as one sequence (same bits).

    python3 benchmarks/bwd_deterministic/smoke.py      # on the GPU machine; prints one line per check
"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import sys

import torch

import flashbuild

sys.path.insert(0, "tests/gpu")
from test_api_gpu import check, grads_of  # noqa: E402

from flashbuild.reference import attention_ref  # noqa: E402

m = flashbuild.load(hdim=64, dtype="fp16", arch="native", direction="bwd", causal="off", features=["softcap"])
torch.manual_seed(5)
b, sq, sk, h, d = 2, 1023, 1500, 8, 64
q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.half)
k = torch.randn(b, sk, h, d, device="cuda", dtype=torch.half)
v = torch.randn(b, sk, h, d, device="cuda", dtype=torch.half)
dout = torch.randn(b, sq, h, d, device="cuda", dtype=torch.half)
out, lse = attention_ref(q, k, v, False)  # fp32 out, (b, h, sq) lse in natural log: what the forward returns
out = out.half()
runs = [m.ext.mha_bwd(dout, q, k, v, out, lse, causal=False, deterministic=True) for _ in range(3)]
torch.cuda.synchronize()
same = all(torch.equal(a, c) for r in runs[1:] for a, c in zip(runs[0], r))
print(f"three deterministic runs identical: {same}")
want = grads_of(lambda *x: attention_ref(*x, False)[0], [x.float() for x in (q, k, v)], dout.float())
low = grads_of(lambda *x: attention_ref(*x, False, upcast=False)[0], [q, k, v], dout)
for name, got, w, lo in zip(("dq", "dk", "dv"), runs[0], want, low):
    check(name, got, w, lo, 1e-3)
cu_q = torch.tensor([0, sq], device="cuda", dtype=torch.int32)
cu_k = torch.tensor([0, sk], device="cuda", dtype=torch.int32)
one = m.ext.mha_varlen_bwd(dout[0], q[0], k[0], v[0], out[0], lse[0].contiguous(), cu_q, cu_k, sq, sk, causal=False,
                           deterministic=True)
dense_one = m.ext.mha_bwd(dout[:1], q[:1], k[:1], v[:1], out[:1], lse[:1].contiguous(), causal=False,
                          deterministic=True)
print(f"one-sequence varlen = dense, bits: {all(torch.equal(a[0], c) for a, c in zip(dense_one, one))}")
assert same and all(torch.equal(a[0], c) for a, c in zip(dense_one, one))
print("smoke passed")
