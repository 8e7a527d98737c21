"""The kernel families do not leak into each other (docs/architecture.md, "Kernels"): a header of kernels/ampere/
includes no kernels/hopper/ header and the reverse, and kernels/common/ includes neither, so an edit to one
family's header recompiles only that family's TUs; what both use lives in kernels/common/. And the helpers both
use are defined once, there: the element type of a dtype, exp2 on the SFU, a register fragment's conversion,
the quad reductions, the launch helpers. Checked statically, from the headers' quoted #includes and text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_binding_includes import KERNELS, QUOTED_INCLUDE

FAMILIES = ("ampere", "hopper")
HEADERS = sorted(p.relative_to(KERNELS).as_posix() for d in (*FAMILIES, "common") for p in (KERNELS / d).glob("*.h"))


def includes(header: str) -> list[str]:
    return QUOTED_INCLUDE.findall((KERNELS / header).read_text())


def crossings() -> set[tuple[str, str]]:
    found = set()
    for header in HEADERS:
        own = header.split("/")[0]
        allowed = {"common"} if own == "common" else {own, "common"}
        found |= {(header, name) for name in includes(header) if name.split("/")[0] not in allowed}
    return found


def test_no_family_includes_another_familys_headers():
    found = sorted(crossings())
    assert found == [], (
        f"{found}: a header includes another family's (or common/ includes a family's); move what both use to "
        "kernels/common/")


def namespaces_named(header: str) -> set[str]:
    """The families whose namespace a header's code opens or names (`namespace hopper`, `flashbuild::ampere`,
    `ampere::x`), comments aside."""
    code = strip_comments((KERNELS / header).read_text())
    return {f for f in FAMILIES if re.search(rf"\bnamespace\s+(flashbuild::)?{f}\b|\b{f}::", code)}


def test_no_header_names_another_familys_namespace():
    """The same rule by name: what a common/ header declares is in namespace flashbuild, and a family's header
    calls nothing of another family's namespace (which only a transitive include could have brought)."""
    found = sorted((h, f) for h in HEADERS for f in namespaces_named(h) if f != h.split("/")[0])
    assert found == [], f"{found}: a header names another family's namespace; what both use is flashbuild:: in common/"


def test_every_quoted_include_is_a_kernel_header():
    missing = sorted((h, name) for h in HEADERS for name in includes(h) if not (KERNELS / name).is_file())
    assert missing == [], missing


# name -> how its definition reads (not a call or a mention). Each is defined once, in kernels/common/.
DEFINITIONS = {
    "ElementOf": r"template\s*<\s*DType\s*>\s*struct\s+ElementOf\b",
    "exp2_ftz": r"\bex2\.approx",  # the SFU's 2^x, whatever a copy of it would be called
    # a register fragment converted through its data() (convert_into, which convert_type calls): no inline copy
    # (a lambda's, an epilogue's); converting a cutlass::Array of its own is another thing
    "fragment conversion": r"convert\(\s*\*\s*reinterpret_cast<[^;]*\.data\(\)",
    "quad_max": r"\bfloat\s+quad_max\s*\(",
    "quad_sum": r"\bfloat\s+quad_sum\s*\(",
    "launch": r"\bvoid\s+launch\s*\(\s*Kernel\b",  # the <<<>>> launch (KernelHandle::launch launches a handle)
    "sm_count": r"\bint\s+sm_count\s*\(",
    "check_head_dim": r"\bvoid\s+check_head_dim\s*\(",
    "FLASHBUILD_CUDA_CHECK": r"#\s*define\s+FLASHBUILD_CUDA_CHECK\b",
}


def strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_a_shared_helper_is_defined_once_in_common(name):
    where = [h for h in HEADERS for _ in re.finditer(DEFINITIONS[name], strip_comments((KERNELS / h).read_text()))]
    assert len(where) == 1 and where[0].startswith("common/"), f"{name} is defined in {where}: once, in kernels/common/"
