"""One non-causal backward of ours and of SDPA-flash (FA2) for ncu: hdim 256, b1 s16384 h8 fp16.
Run: ncu --metrics <see benchmarks/bwd_dq_chunks/ncu_bwd_hdim256.sh> -k regex:"bwd_kernel|flash_bwd_dq_dk_dv" \
         python3 benchmarks/bwd_dq_chunks/ncu_bwd_hdim256.py"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import torch, flashbuild
from torch.nn.attention import sdpa_kernel, SDPBackend
m = flashbuild.load(hdim=[256], dtype="fp16", arch="sm90", direction=["fwd", "bwd"], causal="off", features=[])
b, s, h, d = 1, 16384, 8, 256
q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.half) for _ in range(4))
for t in (q, k, v):
    t.requires_grad_(True)
m.flash_attn_func(q, k, v).backward(do)
qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    torch.nn.functional.scaled_dot_product_attention(qt, kt, vt).backward(do.transpose(1, 2))
torch.cuda.synchronize()
