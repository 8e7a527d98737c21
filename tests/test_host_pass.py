"""Every __global__ kernel's body is compiled in nvcc's device pass alone (common/host_pass.h): the host
pass needs the signature only, and parsing and instantiating the body there cost each TU seconds of
cudafe++ (issue 17, benchmarks/edit_loop/README.md). Checked statically (no nvcc): a kernel added without
the guard would compile and run, just slower to build."""

from __future__ import annotations

import re

from test_binding_includes import KERNELS

# A kernel definition up to its body's opening brace, then the body's first line.
KERNEL_BODY = re.compile(r"^__global__ [^;{]*\{\n(.*)$", re.MULTILINE)
GUARDS = ("#if !FLASHBUILD_HOST_PASS", "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)")


def kernel_bodies() -> dict[str, list[str]]:
    found = {}
    for header in sorted(KERNELS.rglob("*.h")):
        firsts = KERNEL_BODY.findall(header.read_text())
        if firsts:
            found[str(header.relative_to(KERNELS))] = firsts
    return found


def test_every_kernel_body_is_hidden_from_the_host_pass():
    bodies = kernel_bodies()
    assert sum(len(firsts) for firsts in bodies.values()) >= 11, bodies  # the parse still finds the kernels
    for header, firsts in bodies.items():
        for first in firsts:
            assert first.startswith(GUARDS), f"{header}: a kernel body starts {first!r}, not a host-pass guard"
            if first.startswith(GUARDS[0]):
                assert '#include "common/host_pass.h"' in (KERNELS / header).read_text(), header
