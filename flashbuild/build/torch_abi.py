"""The ABI probe (graph.AbiProbe): `python torch_abi.py OUT` imports torch and writes the C++ ABI
and pybind11 ABI defines torch was built with to OUT, one gcc response-file argument per line, for
the binding's compile (`@OUT`). A build runs it as a ninja edge beside the kernel TUs, so importing
torch (seconds) is not on a cold build's way to its first compile. OUT is rewritten only when its
text changes, so the edge's restat leaves the binding alone when torch's ABI did not move.

Runs as a script: only the standard library and torch, not flashbuild (ninja runs it in the build dir).
"""

from __future__ import annotations

import os
import shlex
import sys


def abi_defines(torch_c) -> list[str]:
    """The defines torch.utils.cpp_extension gives an extension for torch's C++ and pybind11 ABIs."""
    defines = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch_c._GLIBCXX_USE_CXX11_ABI)}"]
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(torch_c, f"_PYBIND11_{name}", None)
        if value:
            defines.append(f'-DPYBIND11_{name}="{value}"')
    return defines


def response_file(defines: list[str]) -> str:
    """gcc reads a response file with shell-like quoting: each define one quoted argument."""
    return "".join(shlex.quote(d) + "\n" for d in defines)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: torch_abi.py OUT", file=sys.stderr)
        return 2
    out = argv[1]
    import torch

    text = response_file(abi_defines(torch._C))
    try:
        with open(out) as f:
            if f.read() == text:
                return 0
    except OSError:
        pass
    tmp = f"{out}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
