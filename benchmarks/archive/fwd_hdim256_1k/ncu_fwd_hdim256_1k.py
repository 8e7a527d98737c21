# One non-causal forward each of ours and of SDPA-flash (FA2), fp16 and bf16, for ncu: hdim 256, b16 s1024 h8.
# Run: ncu --metrics gpu__time_duration.sum,... -k regex:"fwd_kernel|flash_fwd" python3 benchmarks/archive/fwd_hdim256_1k/ncu_fwd_hdim256_1k.py
import torch, flashbuild
from torch.nn.attention import sdpa_kernel, SDPBackend
m = flashbuild.load(hdim=[256], dtype=["fp16", "bf16"], arch="sm90", direction=["fwd"], causal="off", features=[])
b, s, h, d = 16, 1024, 8, 256
for dtype in (torch.half, torch.bfloat16):
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(3))
    m.flash_attn_func(q, k, v)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)))
torch.cuda.synchronize()
