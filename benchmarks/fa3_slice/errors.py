"""What a call outside the FA3 slice does (run under `flashbuild run SLICE -- python3 errors.py`): a
head dim, a dtype and a V head dim the slice does not hold each raise flashbuild's RuntimeError (never
an undefined symbol, a crash or another kernel), and the slice still computes the right thing after."""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)

import torch
import torch.nn.functional as F

from flash_attn_interface import flash_attn_func
from flash_attn_config import FLASHBUILD_SLICE

print("slice:", FLASHBUILD_SLICE)


def call(name, d, dtype=torch.float16, dv=None):
    q = torch.randn(2, 256, 4, d, device="cuda", dtype=dtype)
    v = torch.randn(2, 256, 4, dv or d, device="cuda", dtype=dtype)
    try:
        flash_attn_func(q, q, v)
        print(f"{name}: NO ERROR (a kernel ran that the slice should not hold)")
    except RuntimeError as exc:
        print(f"{name}: RuntimeError: {exc}")


held = FLASHBUILD_SLICE["hdim"][0]
for other in [h for h in (128, 96, 64) if h not in FLASHBUILD_SLICE["hdim"]][:2]:
    call(f"hdim {other}", other)
call("bf16", held, torch.bfloat16)
if held == 64 and "hdimv" not in FLASHBUILD_SLICE["features"]:
    call("hdim 64, V head dim 256", 64, dv=256)
for causal in (False, True):
    q, k, v = (torch.randn(2, 1024, 8, held, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=causal)
    ref = F.scaled_dot_product_attention(*(t.float().transpose(1, 2) for t in (q, k, v)), is_causal=causal).transpose(1, 2)
    out.sum().backward()
    print(f"hdim {held} fp16 causal={causal} after the errors: max |out - fp32 SDPA| = "
          f"{(out.float() - ref).abs().max().item():.2e}, dq finite = {bool(q.grad.isfinite().all())}")
