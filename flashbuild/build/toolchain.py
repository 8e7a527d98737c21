"""What a compile and a link need: the toolchain (nvcc, CUTLASS, the kernel headers) and what the
binding and link edges take from torch. Each missing piece is a BuildError saying how to get it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .. import env
from ..errors import BuildError
from . import graph, render
from .plan import Plan


def toolchain(plan: Plan) -> graph.Toolchain:
    """The tools a compile needs, or a BuildError that says how to get the missing one."""
    if plan.nvcc is None:
        raise BuildError("nvcc not found (not in $CUDA_HOME/bin, on PATH, in /usr/local/cuda/bin or from the "
                         "nvidia-cuda-nvcc wheel): install the CUDA toolkit or `pip install nvidia-cuda-nvcc`, "
                         "or set CUDA_HOME; `flashbuild doctor` shows what was found")
    cutlass = env.cutlass_include_dir()
    if cutlass is None:
        raise BuildError("CUTLASS headers not found (no cutlass_library package with source/include): "
                         "`pip install nvidia-cutlass`; `flashbuild doctor` shows what was found")
    kernels = env.kernels_dir()
    headers = ["common/params.h"] + sorted({v.family.launch_headers[v.direction] for v in plan.selection.variants})
    for header in headers:
        if not (kernels / header).is_file():
            raise BuildError(f"kernel header {kernels / header} is missing (needed by {plan.selection.describe()}); "
                             f"check FLASHBUILD_ROOT ({env.repo_root()}) or restore kernels/ with `git checkout kernels`")
    return graph.Toolchain(nvcc=plan.nvcc.path, kernels_dir=kernels, cutlass_include=cutlass,
                           launcher=plan.options.launcher)


def _torch_include_paths(cpp_extension) -> list[str]:
    """torch's include dirs, across the two signatures of include_paths()."""
    for kwargs in ({"device_type": "cuda"}, {"cuda": True}, {}):
        try:
            return list(cpp_extension.include_paths(**kwargs))
        except (TypeError, OSError):  # older signature / torch cannot find CUDA_HOME (we add CUDA ourselves)
            continue
    return []


LINK_SPEC_FILE = "link_spec.json"


def torch_link_spec(plan: Plan) -> graph.LinkSpec:
    """What the binding and link edges need from torch. Importing torch takes seconds (3.3 s on the
    H200 host), so the spec is kept in the build dir and reused while what can be read without
    importing torch is unchanged: its location and version, the host compiler and the binding."""
    cxx = env.find_host_cxx()
    if cxx is None:
        raise BuildError("no host C++ compiler for the binding (no $CXX, c++, g++ or clang++ on PATH): "
                         "install one (apt-get install g++) and rerun")
    binding = env.kernels_dir() / "binding" / "flash_api.cpp"
    if not binding.is_file():
        raise BuildError(f"the torch binding {binding} is missing; restore it (`git checkout kernels/binding`) "
                         f"or build kernel objects only with `{plan.command()} --compile-only`")
    torch = env.torch_info()
    stamp = {"torch": [str(torch.root), torch.version] if torch else None, "cxx": str(cxx),
             "binding": str(binding), "module": plan.module_name}
    saved_path = plan.build_dir / LINK_SPEC_FILE
    try:
        saved = json.loads(saved_path.read_text())
        if saved["stamp"] == stamp:
            spec = saved["spec"]
            return graph.LinkSpec(
                module_name=spec["module_name"], cxx=Path(spec["cxx"]), cxx_std=spec["cxx_std"],
                include_dirs=tuple(Path(p) for p in spec["include_dirs"]), defines=tuple(spec["defines"]),
                torch_lib=Path(spec["torch_lib"]), binding_source=Path(spec["binding_source"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    spec = _import_torch_link_spec(plan, cxx, binding)
    fields = {k: (str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, tuple) else v)
              for k, v in dataclasses.asdict(spec).items()}
    render.write_if_different(saved_path, json.dumps({"stamp": stamp, "spec": fields}, indent=1) + "\n")
    return spec


def _import_torch_link_spec(plan: Plan, cxx: Path, binding: Path) -> graph.LinkSpec:
    import torch
    from torch.utils import cpp_extension
    import sysconfig

    includes = _torch_include_paths(cpp_extension) + [sysconfig.get_paths()["include"]]
    cuda_include = env.cuda_include_dir(plan.nvcc.path)
    if cuda_include:
        includes.append(str(cuda_include))
    includes += [str(d) for d in env.nvidia_wheel_include_dirs()]
    defines = [f"-DTORCH_EXTENSION_NAME={plan.module_name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):  # the pybind11 ABI torch was built with
        value = getattr(torch._C, f"_PYBIND11_{name}", None)
        if value:
            defines.append(f'-DPYBIND11_{name}="{value}"')
    major_minor = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    return graph.LinkSpec(
        module_name=plan.module_name, cxx=cxx,
        cxx_std="c++20" if major_minor >= (2, 13) else "c++17",  # torch >= 2.13 headers need C++20
        include_dirs=tuple(Path(p) for p in dict.fromkeys(includes)), defines=tuple(defines),
        torch_lib=Path(torch.__file__).parent / "lib", binding_source=binding)
