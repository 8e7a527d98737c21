"""What a compile and a link need: the toolchain (nvcc, CUTLASS, the tree's headers and the
profile's flags) and what the API and link edges (and an upstream tree's kernels) take from torch.
Each missing piece is a BuildError saying how to get it."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import env
from ..errors import BuildError
from ..sources import profile as profiles, tree_check
from . import cache, graph, nvcc_overlap, render, torch_abi
from .plan import Plan

# torch_spec()'s record in the build dir: written only for a profile whose kernels include torch (the
# built-in profile's plan reads torch's install and leaves its ABI to a ninja edge, torch_abi.py).
TORCH_SPEC_FILE = "torch_spec.json"
LINK_SPEC_FILE = TORCH_SPEC_FILE  # the name earlier tests and tools know it by
# The CPU wheel of torch ships c10/cuda headers without the one its CUDA build generates
# (c10/cuda/impl/cuda_cmake_macros.h); c10 has a switch for that, which compiling (never linking) an
# upstream kernel TU against a CPU torch uses.
NO_CUDA_CONFIG_HEADER = "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE"


@dataclass(frozen=True)
class TorchSpec:
    """torch's headers, defines and libraries: static_torch_spec reads all but the ABI defines from
    torch's install; torch_spec imports torch (seconds) for those too and keeps the spec in the build dir."""

    include_dirs: tuple[Path, ...]
    defines: tuple[str, ...]        # the C++ ABI and pybind11 ABI torch was built with
    cxx_std: str
    torch_lib: Path
    cuda: bool


def tree_root(plan: Plan) -> Path:
    return Path(plan.selection.source) if plan.selection.source else tree_check.default_source(plan.profile)


def _cutlass(plan: Plan) -> Path:
    include = tree_check.cutlass_include(plan.profile, tree_root(plan))
    if include is None or not (include / "cutlass" / "cutlass.h").is_file():
        where = "no cutlass_library package with source/include" if plan.profile.cutlass == "wheel" else \
            f"{include} has no cutlass/cutlass.h (profile key tree.cutlass)"
        raise BuildError(f"CUTLASS headers not found ({where}): `pip install nvidia-cutlass`, or check --source; "
                         "`flashbuild doctor` shows what was found")
    return include


def feature_defines(plan: Plan) -> list[str]:
    """-D switches that compile out the features a tree's build leaves out (profile mode "defines")."""
    profile = plan.profile
    if profile.feature_mode != "defines":
        return []
    return [f"-D{profile.disable_defines[f]}" for f in profile.features if f not in plan.selection.features]


def toolchain(plan: Plan) -> graph.Toolchain:
    """The tools a compile needs, or a BuildError that says how to get the missing one."""
    if plan.nvcc is None:
        raise BuildError("nvcc not found (not in $CUDA_HOME/bin, on PATH, in /usr/local/cuda/bin or from the "
                         "nvidia-cuda-nvcc wheel): install the CUDA toolkit or `pip install nvidia-cuda-nvcc`, "
                         "or set CUDA_HOME; `flashbuild doctor` shows what was found")
    profile, root = plan.profile, tree_root(plan)
    cutlass = _cutlass(plan)
    if profile.builtin:
        kernels = env.kernels_dir()
        headers = ["common/params.h"] + sorted({v.family.launch_headers[v.direction] for v in plan.selection.variants})
        for header in headers:
            if not (kernels / header).is_file():
                raise BuildError(f"kernel header {kernels / header} is missing (needed by {plan.selection.describe()}); "
                                 f"check FLASHBUILD_ROOT ({env.repo_root()}) or restore kernels/ with `git checkout kernels`")
    else:
        tree_check.check_tree(profile, root)
    includes = [root / d for d in profile.include_dirs] + [cutlass]
    flags = list(profile.nvcc_flags) + list(profile.defines) + feature_defines(plan)
    if profile.kernels_need_torch:
        spec = torch_spec(plan)
        includes += list(spec.include_dirs)
        flags = [f for f in flags if not f.startswith("-std=")] + [f"-std={spec.cxx_std}", *spec.defines]
        if not spec.cuda:  # compile-only against a CPU torch: its c10/cuda headers lack one generated file
            flags.append(NO_CUDA_CONFIG_HEADER)
    return graph.Toolchain(nvcc=plan.nvcc.path, include_dirs=tuple(includes), gencodes=dict(profile.gencodes),
                           flags=tuple(flags), launcher=plan.options.launcher, overlap=overlap_driver(plan.nvcc.path))


def overlap_driver(nvcc: Path) -> tuple[str, ...]:
    """The command that runs an `nvcc -c` with its host and device front ends at once (nvcc_overlap.py, a
    stdlib-only script: ninja runs it without flashbuild on the path); () when FLASHBUILD_NVCC_OVERLAP=0,
    or when `nvcc` is not a CUDA toolkit's (no cudafe++ beside it, no nvvm/bin/cicc): a wrapper or a
    stand-in is run as it is, once per compile."""
    if os.environ.get("FLASHBUILD_NVCC_OVERLAP", "1").strip() == "0":
        return ()
    bin_dir = Path(nvcc).resolve().parent
    if not ((bin_dir / "cudafe++").is_file() and (bin_dir.parent / "nvvm" / "bin" / "cicc").is_file()):
        return ()
    return (sys.executable, str(Path(nvcc_overlap.__file__).resolve()))


def _torch_include_dirs(root: Path) -> list[Path]:
    """torch's include dirs as torch.utils.cpp_extension.include_paths() lists them, read from the
    install without importing torch. Its CUDA dirs aside ($CUDA_HOME or $CUDA_INC_PATH, $CUDNN_HOME's):
    the toolchain adds nvcc's own include dir, and no API source includes a cuDNN header."""
    include = root / "include"
    return [d for d in (include, include / "torch" / "csrc" / "api" / "include", include / "TH", include / "THC")
            if d.is_dir()]


def static_torch_spec(plan: Plan) -> TorchSpec:
    """What the compile and link flags take from torch that its install tells without an import:
    its include dirs (and Python's, nvcc's, the nvidia wheels'), C++ standard, library dir and
    whether it has CUDA; not its ABI defines (`defines` is empty: torch_abi.py reads those)."""
    import sysconfig

    torch = env.torch_info()
    if torch is None:
        raise BuildError(f"torch is not installed, and {plan.profile.name}'s build needs its headers: pip install torch")
    includes = [*_torch_include_dirs(torch.root), Path(sysconfig.get_paths()["include"])]
    cuda_include = env.cuda_include_dir(plan.nvcc.path) if plan.nvcc else None
    if cuda_include:
        includes.append(cuda_include)
    includes += env.nvidia_wheel_include_dirs()
    try:
        major_minor = tuple(int(p) for p in torch.version.split("+")[0].split(".")[:2])
    except ValueError:
        major_minor = (0, 0)
    return TorchSpec(include_dirs=tuple(dict.fromkeys(Path(p) for p in includes)), defines=(),
                     cxx_std="c++20" if major_minor >= (2, 13) else "c++17",  # torch >= 2.13 headers need C++20
                     torch_lib=torch.root / "lib", cuda=torch.cuda is not None)


def torch_spec(plan: Plan) -> TorchSpec:
    """torch's part of the compile and link flags. Importing torch takes seconds (3.3 s on the H200
    host), so the spec is kept in the build dir and reused while what can be read without importing
    torch is unchanged: its location and version, and nvcc."""
    torch = env.torch_info()
    if torch is None:
        raise BuildError(f"torch is not installed, and {plan.profile.name}'s build needs its headers: "
                         "pip install torch")
    stamp = {"torch": [str(torch.root), torch.version], "nvcc": str(plan.nvcc.path) if plan.nvcc else None}
    # Read and written before the build prepares its dir (an upstream tree's toolchain needs the spec): check it here.
    cache.prepare_build_dir(plan.build_dir, in_cache=plan.options.build_dir is None)
    saved_path = plan.build_dir / TORCH_SPEC_FILE
    try:
        saved = json.loads(saved_path.read_text())
        if saved["stamp"] == stamp:
            spec = saved["spec"]
            return TorchSpec(tuple(Path(p) for p in spec["include_dirs"]), tuple(spec["defines"]), spec["cxx_std"],
                             Path(spec["torch_lib"]), bool(spec["cuda"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    spec = _import_torch_spec(plan)
    fields = {k: (str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, tuple) else v)
              for k, v in dataclasses.asdict(spec).items()}
    with cache.private_umask():
        render.write_if_different(saved_path, json.dumps({"stamp": stamp, "spec": fields}, indent=1) + "\n")
    return spec


def _import_torch_spec(plan: Plan) -> TorchSpec:
    import torch

    return dataclasses.replace(static_torch_spec(plan), defines=tuple(torch_abi.abi_defines(torch._C)))


def _interpreter() -> Path | None:
    """This Python as the ABI probe runs it: python3.X beside it when that is the same file, so that
    `python`, `python3` and `python3.X` plan the same build.ninja (a no-op stays one); None when the
    interpreter has no path (embedded)."""
    if not sys.executable:
        return None
    exe = Path(sys.executable)
    versioned = exe.with_name(f"python{sys.version_info.major}.{sys.version_info.minor}")
    try:
        if versioned != exe and os.path.samefile(versioned, exe):
            return versioned
    except OSError:
        pass
    return exe


def torch_link_spec(plan: Plan) -> graph.LinkSpec:
    """What the API sources and the link edge need: torch's spec, the host compiler, the tree."""
    cxx = env.find_host_cxx()
    if cxx is None:
        raise BuildError("no host C++ compiler for the binding (no $CXX, c++, g++ or clang++ on PATH): "
                         "install one (apt-get install g++) and rerun")
    profile, root = plan.profile, tree_root(plan)
    sources = tuple(root / s for s in profile.api_sources)
    for source in sources:
        if not source.is_file():
            raise BuildError(f"the API source {source} is missing (profile {profile.name}, key extension.sources); "
                             f"restore it, or build kernel objects only with `{plan.command()} --compile-only`")
    python = _interpreter()
    if profile.kernels_need_torch or python is None:  # torch imported for the kernels' flags (or no
        spec, probe = torch_spec(plan), None             # interpreter path to run a probe): its ABI inline
    else:  # a ninja edge reads the ABI beside the kernel TUs (graph.AbiProbe): no import of torch here
        spec, torch = static_torch_spec(plan), env.torch_info()
        probe = graph.AbiProbe(python=python, script=Path(torch_abi.__file__), torch_root=torch.root,
                               torch_version=torch.version)
    defines = [f"-DTORCH_EXTENSION_NAME={plan.module_name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *spec.defines,
               *profile.defines, *feature_defines(plan)]
    return graph.LinkSpec(
        module_name=plan.module_name, cxx=cxx, cxx_std=spec.cxx_std, include_dirs=spec.include_dirs,
        defines=tuple(defines), torch_lib=spec.torch_lib, api_sources=sources,
        tree_include_dirs=tuple(root / d for d in profile.include_dirs) + (_cutlass(plan),),
        cxx_flags=profile.cxx_flags, abi_probe=probe)
