"""Small odd-size fwd+bwd and split-KV calls for compute-sanitizer memcheck: rows past the end of
q/k/v are loaded with zero-size cp.async (copy_rows); memcheck must report no errors."""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import torch, flashbuild
m = flashbuild.load(hdim=[64], dtype="fp16", arch="sm90", direction=["fwd", "bwd", "splitkv"], features=[])
e = m.ext
torch.manual_seed(0)
for causal in (False, True):
    for (b, sq, sk) in [(1, 113, 1023), (2, 17, 17), (1, 1023, 113)]:
        q = torch.randn(b, sq, 4, 64, device="cuda", dtype=torch.half, requires_grad=True)
        k = torch.randn(b, sk, 2, 64, device="cuda", dtype=torch.half, requires_grad=True)
        v = torch.randn(b, sk, 2, 64, device="cuda", dtype=torch.half, requires_grad=True)
        out = m.flash_attn_func(q, k, v, causal=causal)
        out.backward(torch.randn_like(out))
    kc = torch.randn(3, 777, 2, 64, device="cuda", dtype=torch.half); vc = torch.randn_like(kc)
    q = torch.randn(3, 1, 8, 64, device="cuda", dtype=torch.half)
    m.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=torch.tensor([777, 5, 300], device="cuda", dtype=torch.int32), causal=causal)
torch.cuda.synchronize()
print("san calls done")
