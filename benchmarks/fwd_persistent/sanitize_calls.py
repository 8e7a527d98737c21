"""Persistent-forward calls for compute-sanitizer (memcheck and racecheck): hdim 256 fp16 non-causal
on sm90, with about three query blocks per CTA (132 SMs), so that each CTA's blocks start their
loads during the block before; dense with partial last query and key blocks, and varlen with
query blocks that have no rows. Run from the repository root:
  compute-sanitizer --tool memcheck python3 benchmarks/fwd_persistent/sanitize_calls.py"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import itertools
import torch, flashbuild
m = flashbuild.load(hdim=[256], dtype="fp16", arch="sm90", direction=["fwd"], causal="off", features=[])
torch.manual_seed(0)
q = torch.randn(1, 383, 132, 256, device="cuda", dtype=torch.half)
k, v = (torch.randn(1, 130, 66, 256, device="cuda", dtype=torch.half) for _ in range(2))
m.flash_attn_func(q, k, v)
lens_q, lens_k = [1, 300, 129, 64], [5, 129, 300, 1]
cu_q, cu_k = (torch.tensor([0, *itertools.accumulate(s)], device="cuda", dtype=torch.int32) for s in (lens_q, lens_k))
q = torch.randn(sum(lens_q), 132, 256, device="cuda", dtype=torch.half)
k, v = (torch.randn(sum(lens_k), 44, 256, device="cuda", dtype=torch.half) for _ in range(2))
m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k))
torch.cuda.synchronize()
print("sanitize calls done")
