"""Odd-size backward calls for compute-sanitizer memcheck, fixed-length and packed (varlen): the dQ
reductions of a sequence's last, partial query block land in dq_accum's slack rows, unpredicated
(bwd_kernel.h); memcheck must report no errors. hdim 64 (128-row query blocks) and 256 (64 rows)."""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import torch, flashbuild
m = flashbuild.load(hdim=[64, 128, 256], dtype="fp16", arch="sm90", direction=["fwd", "bwd"], features=[])
torch.manual_seed(0)
for d in (64, 256):
    for causal in (False, True):
        for (b, sq, sk) in [(1, 113, 1023), (2, 17, 17), (1, 1023, 113), (1, 1, 300)]:
            q = torch.randn(b, sq, 4, d, device="cuda", dtype=torch.half, requires_grad=True)
            k = torch.randn(b, sk, 2, d, device="cuda", dtype=torch.half, requires_grad=True)
            v = torch.randn(b, sk, 2, d, device="cuda", dtype=torch.half, requires_grad=True)
            out = m.flash_attn_func(q, k, v, causal=causal)
            out.backward(torch.randn_like(out))
        lens = [1, 17, 113, 64, 300]
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device="cuda", dtype=torch.int32)
        q = torch.randn(cu[-1].item(), 4, d, device="cuda", dtype=torch.half, requires_grad=True)
        k = torch.randn(cu[-1].item(), 2, d, device="cuda", dtype=torch.half, requires_grad=True)
        v = torch.randn(cu[-1].item(), 2, d, device="cuda", dtype=torch.half, requires_grad=True)
        out = m.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=causal)
        out.backward(torch.randn_like(out))
torch.cuda.synchronize()
print("memcheck calls done")
