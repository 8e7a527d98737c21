"""Per-call host time of hot.cpp's flash_attn_func built at each -O level (CPU tensors, tiny shapes:
the allocation and the checks, not any math). Interleaved rounds, best of 7 rounds per level."""
import importlib, sys, timeit
import torch
sys.path.insert(0, ".")
mods = {o: importlib.import_module(f"hot_{o}") for o in ("O0", "Og", "O1", "O2")}
q = torch.randn(2, 16, 4, 64, dtype=torch.half); k = torch.randn(2, 16, 4, 64, dtype=torch.half); v = k.clone()
best = {o: float("inf") for o in mods}
N = 20000
for _ in range(7):
    for o, m in mods.items():
        f = m.flash_attn_func
        t = timeit.timeit(lambda: f(q, k, v, causal=True), number=N) / N
        best[o] = min(best[o], t)
empty = min(timeit.repeat(lambda: (torch.empty((2, 16, 4, 64), dtype=torch.half), torch.empty((2, 4, 16))), number=N, repeat=7)) / N
for o, t in best.items():
    print(f"-{o}: {t * 1e6:.2f} us per call")
print(f"for scale: two torch.empty from Python {empty * 1e6:.2f} us")
