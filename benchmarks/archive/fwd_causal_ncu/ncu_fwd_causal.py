# One causal and one non-causal fwd call of ours and of SDPA-flash (FA2), for ncu: hdim 64, b4 s4096 h32 fp16.
# Run: ncu --metrics <see benchmarks/archive/fwd_causal_ncu/README.md> -k regex:"fwd_kernel|flash_fwd" python3 benchmarks/archive/fwd_causal_ncu/ncu_fwd_causal.py
import torch, flashbuild
from torch.nn.attention import sdpa_kernel, SDPBackend
m = flashbuild.load(hdim=[64], dtype="fp16", arch="sm90", direction=["fwd"], features=[])
b, s, h, d = 4, 4096, 32, 64
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.half) for _ in range(3))
for causal in (True, False):
    m.ext.flash_attn_func(q, k, v, causal=causal)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
torch.cuda.synchronize()
