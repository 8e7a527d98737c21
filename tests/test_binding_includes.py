"""The binding TU (kernels/binding/flash_api.cpp) is untouched by kernel edits (issue 17): its
include closure inside kernels/ holds only torch-free declarations (kernels/common/), never a
family's kernel or launch header, so an edit to e.g. kernels/ampere/fwd_kernel.h recompiles the
instantiation TUs that include it and not the binding (22 s on the H200 host). Checked statically
(no nvcc): the closure is read from the quoted #includes of the binding and of the two generated
headers it includes (their templates), resolved against kernels/.

Its compile is cut too: it includes torch narrowly (the Tensor class, one ATen/ops/*.h per at::
function, c10's CUDA stream and guard, torch's pybind11 casters), checked statically and by compiling
it for real with the build's own flags (host compiler, torch's headers; no GPU)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import requires_nvcc

REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "kernels"
BINDING = KERNELS / "binding" / "flash_api.cpp"
GENERATED = {"flashbuild_dispatch.h": REPO / "templates" / "dispatch.h.j2",
             "flashbuild_table.h": REPO / "templates" / "build_table.h.j2"}
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def include_closure(start: Path) -> set[str]:
    """Every kernels/-relative header reachable from `start` through quoted includes (generated
    headers are followed into their templates and reported by their generated name)."""
    seen: set[str] = set()
    pending = [start]
    while pending:
        for name in QUOTED_INCLUDE.findall(pending.pop().read_text()):
            if name in seen:
                continue
            seen.add(name)
            source = GENERATED.get(name, KERNELS / name)
            assert source.is_file(), f"{name} (included from the binding's closure) is neither in kernels/ nor generated"
            pending.append(source)
    return seen


def test_the_binding_includes_no_kernel_or_launch_header():
    closure = include_closure(BINDING)
    family_headers = sorted(name for name in closure if name.split("/")[0] in {"ampere", "hopper"})
    assert family_headers == [], f"the binding TU would recompile on an edit of {family_headers}"
    assert closure <= {*GENERATED, "common/params.h", "common/variant_space.h", "common/splitkv_heuristic.h",
                       "common/index_errors.h", "common/splitkv_descriptor_switch.h",
                       "common/env_value.h", "common/splitkv_path.h"}, \
        sorted(closure)


# The binding's compile is on the critical path of a cold build (issue 17: 22 s alone on the H200 host),
# so it includes torch narrowly: the Tensor class, one ATen/ops/*.h per at:: function, c10's CUDA
# stream and guard, torch's pybind11 casters. These headers would bring back what that cut.
ANGLE_INCLUDE = re.compile(r"^\s*#\s*include\s+<([^>]+)>", re.MULTILINE)
BROAD_HEADERS = {
    "ATen/ATen.h": "every operator",
    "ATen/Functions.h": "every operator",
    "ATen/NativeFunctions.h": "every operator's native declaration",
    "ATen/TensorIndexing.h": "ATen/Context.h and more, for t.index({...})",
    "ATen/cuda/CUDAContext.h": "the cuBLAS, cuSPARSE and cuSOLVER headers",
    "ATen/cuda/CUDAContextLight.h": "the cuBLAS, cuSPARSE and cuSOLVER headers",
    "torch/python.h": "the C++ frontend (torch/nn)",
    "torch/extension.h": "the C++ frontend (torch/nn, optim, data)",
    "torch/torch.h": "the C++ frontend",
}


def test_the_binding_includes_torch_narrowly():
    text = BINDING.read_text()
    broad = {name: why for name, why in BROAD_HEADERS.items() if name in ANGLE_INCLUDE.findall(text)}
    assert broad == {}, f"the binding includes headers that cost seconds of its compile: {broad}"
    first_include = ANGLE_INCLUDE.search(text).start()
    for define in ("AT_PER_OPERATOR_HEADERS", "TORCH_ASSERT_ONLY_METHOD_OPERATORS"):
        assert re.search(rf"^#define {define}$", text[:first_include], re.MULTILINE), \
            f"{define} must be defined before the binding's first include (it makes ATen/Functions.h an error)"


def _torch_has_headers() -> bool:
    from flashbuild import env

    info = env.torch_info()
    return info is not None and (info.root / "include" / "ATen" / "ops" / "empty.h").is_file()


@requires_nvcc
@pytest.mark.compile
@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.skipif(not _torch_has_headers(), reason="torch with its C++ headers (ATen/ops) is not installed")
def test_the_binding_compiles_without_the_broad_headers(tmp_path):
    """The binding compiled for real (host compiler, the build's own flags: what the main job's cxx
    edge runs; with a CPU torch plus the switch for its missing CUDA config header), about 15 s: its
    header closure (the depfile) holds none of BROAD_HEADERS nor the CUDA math libraries' headers,
    and it defines the module's init function under the build's module name."""
    from flashbuild.pipeline import builder, graph, render, toolchain

    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", build_dir=tmp_path / "build")
    plan = builder.make_plan(selection, options)
    tools = builder.toolchain(plan)
    builder.prepare(plan)
    render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                        context=builder.tree_context(plan))
    link = toolchain.torch_link_spec(plan)
    cpu_torch = [] if toolchain.static_torch_spec(plan).cuda else [toolchain.NO_CUDA_CONFIG_HEADER]
    # The ABI probe's edge first, as ninja runs it: the compile force-includes its header from the build dir.
    probe = link.abi_probe
    subprocess.run([str(probe.python), str(probe.script), graph.TORCH_ABI_FILE, str(probe.torch_root),
                    probe.torch_version], cwd=plan.build_dir, check=True)
    obj, depfile = tmp_path / "flash_api.o", tmp_path / "flash_api.o.d"
    compiled = subprocess.run([str(link.cxx), *graph.binding_flags(link, tools, plan.gen_dir), *cpu_torch,
                               "-MD", "-MF", str(depfile), "-c", str(BINDING), "-o", str(obj)],
                              capture_output=True, text=True, cwd=plan.build_dir)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    headers = depfile.read_text()
    broad = [name for name in BROAD_HEADERS if f"/{name}" in headers]
    math_libraries = re.findall(r"\b(cublas\w*\.h|cusparse\w*\.h|cusolver\w*\.h)", headers)
    assert broad == [] and math_libraries == [], (broad, math_libraries)
    assert "torch/nn/" not in headers
    exported = subprocess.run(["nm", "-g", "--defined-only", str(obj)], capture_output=True, text=True, check=True)
    assert f" T PyInit_{plan.module_name}\n" in exported.stdout
