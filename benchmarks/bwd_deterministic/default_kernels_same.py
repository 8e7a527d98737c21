"""Whether the Hopper backward's default kernel (kOrdered = false) of each object is the kernel before the
deterministic mode, instruction for instruction, and what the ordered instantiation costs in registers and
stack; every other kernel of the object must be identical too.

    python3 benchmarks/bwd_deterministic/default_kernels_same.py BASE_OBJ_DIR NEW_OBJ_DIR

(no GPU: cuobjdump of objects nvcc compiled; CUOBJDUMP= for another cuobjdump). The base objects have one
bwd_kernel per object (no kOrdered argument); the new ones two.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checks"))
from sass_diff import funcs  # noqa: E402  (each function's instructions, addresses stripped)

CU = os.environ.get("CUOBJDUMP", "cuobjdump")


def resources(obj):
    text = subprocess.run([CU, "--dump-resource-usage", str(obj)], capture_output=True, text=True).stdout
    return {m.group(1): m.group(2) for m in re.finditer(r"Function (\S+):\s*\n\s*(REG:\d+ STACK:\d+)", text)}


for oa in sorted(Path(sys.argv[1]).glob("*.o")):
    ob = Path(sys.argv[2]) / oa.name
    a, b, r = funcs(oa), funcs(ob), resources(ob)
    base = [k for k in a if "hopper10bwd_kernel" in k]
    default = [k for k in b if "Lb0EEEvNS0_9BwdKernel" in k]
    ordered = [k for k in b if "Lb1EEEvNS0_9BwdKernel" in k]
    others = all(a[k] == b.get(k) for k in a if "hopper10bwd_kernel" not in k)
    same = len(base) == 1 and len(default) == 1 and b[default[0]] == a[base[0]]
    print(f"{oa.name:34} default {'identical' if same else 'DIFFERS'} ({len(b[default[0]])} instr); "
          f"ordered {len(b[ordered[0]])} instr {r.get(ordered[0], '?')}; other kernels {'identical' if others else 'DIFFER'}")
