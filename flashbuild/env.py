"""Paths and tools: where the sources, the cache and each compiler live, found without importing
torch (or anything heavy). Every finder says where it looked, so `flashbuild doctor` can explain."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30
MEMORY_PER_TU = 4 * GIB  # a CuTe attention TU takes 3-6 GB in nvcc


# ---------------------------------------------------------------- sources and cache

def package_dir() -> Path:
    return Path(__file__).resolve().parent


def user_path(text: str) -> Path:
    """A path from the environment with ~ expanded; `~nosuchuser/...` stays as written (pathlib raises
    RuntimeError for it), so the caller's own check then says the path does not hold what it needs."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)


def repo_root() -> Path:
    """The tree holding kernels/, templates/ and configs/: next to the package (an editable
    install), or FLASHBUILD_ROOT when set (e.g. a patched copy of the kernels)."""
    override = os.environ.get("FLASHBUILD_ROOT")
    return user_path(override).resolve() if override else package_dir().parent


ROOT_PARTS = ("kernels", "templates", "configs")


def root_problem() -> str | None:
    """Why the tree flashbuild reads its sources from is unusable (naming FLASHBUILD_ROOT when it
    chose the tree, and the fix), or None."""
    override = os.environ.get("FLASHBUILD_ROOT")
    root = repo_root()
    missing = [part for part in ROOT_PARTS if not (root / part).is_dir()]
    if not missing:
        return None
    where = f"FLASHBUILD_ROOT={override}" if override else f"the flashbuild checkout {root}"
    fix = ("point FLASHBUILD_ROOT at a flashbuild checkout (it needs kernels/, templates/ and configs/) or unset it"
           if override else "reinstall from a checkout: pip install -e . (kernels/, templates/ and configs/ are used in place)")
    return f"{where} has no {', '.join(p + '/' for p in missing)}: {fix}"


def kernels_dir() -> Path:
    return repo_root() / "kernels"


def templates_dir() -> Path:
    return repo_root() / "templates"


def configs_dir() -> Path:
    return repo_root() / "configs"


def default_cache_dir() -> Path:
    """The user's cache dir (platformdirs; the XDG rule without it)."""
    try:
        import platformdirs
    except ImportError:  # the GPU machine may lack it; the XDG rule is what platformdirs does on Linux
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        return Path(base) / "flashbuild"
    return Path(platformdirs.user_cache_dir("flashbuild"))


def cache_dir() -> Path:
    """FLASHBUILD_CACHE_DIR, else the user's cache dir. Where it is only: pipeline/cache.py checks it."""
    override = os.environ.get("FLASHBUILD_CACHE_DIR")
    if override:
        head = override.split("/")[0]
        if head.startswith("~") and os.path.expanduser(head) == head:  # pathlib would raise RuntimeError
            from .errors import SelectionError
            raise SelectionError(f"FLASHBUILD_CACHE_DIR={override!r}: {head} names no user's home directory; set "
                                 f"it to a directory path (e.g. export FLASHBUILD_CACHE_DIR=$HOME/.cache/flashbuild)")
        return Path(override).expanduser().absolute()
    return default_cache_dir()


# ---------------------------------------------------------------- nvcc and CUDA

@dataclass(frozen=True)
class Found:
    """A tool or directory, where it was found (`source`) and why that one was picked (`reason`)."""

    path: Path
    source: str
    reason: str


def _nvidia_wheel_dirs() -> list[Path]:
    """Folders of the `nvidia` namespace package (pip wheels such as nvidia-cuda-nvcc)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def cuda_home_problem(home: str, var: str = "CUDA_HOME") -> str | None:
    """Why `home` (the value of CUDA_HOME or CUDA_PATH) gives no runnable bin/nvcc, or None."""
    root = user_path(home)
    nvcc = root / "bin" / "nvcc"
    if not root.exists():
        return f"{var}={home} has no bin/nvcc (the directory does not exist)"
    if not root.is_dir():
        return f"{var}={home} has no bin/nvcc (it is not a directory)"
    if not nvcc.exists():
        return f"{var}={home} has no bin/nvcc" + (" (it is a broken link)" if nvcc.is_symlink() else "")
    if not nvcc.is_file():
        return f"{var}={home} has no runnable bin/nvcc (it is not a file)"
    if not os.access(nvcc, os.X_OK):
        return f"{var}={home} has no runnable bin/nvcc (it is not executable)"
    return None


def find_nvcc() -> Found | None:
    """nvcc from, in order: $CUDA_HOME (or $CUDA_PATH)/bin, PATH, /usr/local/cuda/bin, the
    nvidia-cuda-nvcc wheel. `reason` says why that one, and why not those before it (a CUDA_HOME
    without a runnable bin/nvcc is named there: `flashbuild doctor` reports it)."""
    tried = []
    var = "CUDA_HOME" if os.environ.get("CUDA_HOME") else "CUDA_PATH"
    cuda_home = os.environ.get(var)
    if cuda_home:
        problem = cuda_home_problem(cuda_home, var)
        if problem is None:
            return Found(user_path(cuda_home) / "bin" / "nvcc", "CUDA_HOME",
                         f"{var}={cuda_home} is set and has bin/nvcc")
        tried.append(problem)
    else:
        tried.append("CUDA_HOME is not set")
    on_path = shutil.which("nvcc")
    if on_path:
        return Found(Path(on_path), "PATH", "; ".join(tried + ["nvcc is on PATH"]))
    tried.append("no nvcc on PATH")
    default = Path("/usr/local/cuda/bin/nvcc")
    if default.is_file() and os.access(default, os.X_OK):
        return Found(default, "/usr/local/cuda", "; ".join(tried + ["found the default install"]))
    tried.append("no /usr/local/cuda/bin/nvcc")
    for base in _nvidia_wheel_dirs():
        for sub in ("cuda_nvcc", "cu13", "cu12"):
            candidate = base / sub / "bin" / "nvcc"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return Found(candidate, "nvidia-cuda-nvcc wheel", "; ".join(tried + [f"found nvidia/{sub}"]))
    return None


TOOL_TIMEOUT_S = 30  # a `--version` that takes longer than this is a tool that does not work


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: Path) -> str:
    """'13.0.88' from `nvcc --version` ("Cuda compilation tools, release 13.0, V13.0.88"); 'unknown'
    when it does not run, fails, or names no release (`flashbuild doctor` says which)."""
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, errors="replace",
                             check=False, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    match = re.search(r"\bV(\d+\.\d+\.\d+)", out.stdout) or re.search(r"release (\d+\.\d+)", out.stdout)
    return match.group(1) if match else "unknown"


def cuda_include_dir(nvcc: Path) -> Path | None:
    """The CUDA runtime headers that go with this nvcc (the binding includes cuda_runtime.h).
    nvcc may be a wrapper script on PATH, so fall back to CUDA_HOME, /usr/local/cuda and the wheels."""
    candidates = [nvcc.resolve().parent.parent / "include"]
    if os.environ.get("CUDA_HOME"):
        candidates.append(Path(os.environ["CUDA_HOME"]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for base in _nvidia_wheel_dirs():
        candidates += [base / "cu13" / "include", base / "cuda_runtime" / "include"]
    return next((c for c in candidates if (c / "cuda_runtime.h").is_file()), None)


# The pip wheel that carries each CUDA binary tool, for machines whose CUDA install lacks it.
CUDA_TOOL_WHEELS = {"cuobjdump": "nvidia-cuda-cuobjdump", "nvdisasm": "nvidia-cuda-nvdisasm",
                    "compute-sanitizer": "nvidia-cuda-sanitizer-api"}


def find_cuda_tool(name: str) -> Found | None:
    """A CUDA binary tool (cuobjdump, nvdisasm, compute-sanitizer) from, in order: next to nvcc,
    $CUDA_HOME/bin, PATH, /usr/local/cuda/bin, the tool's nvidia-* wheel."""
    candidates: list[tuple[Path, str]] = []
    nvcc = find_nvcc()
    if nvcc is not None:
        candidates.append((nvcc.path.resolve().parent / name, f"next to nvcc ({nvcc.path})"))
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        candidates.append((Path(cuda_home) / "bin" / name, "CUDA_HOME"))
    on_path = shutil.which(name)
    if on_path:
        candidates.append((Path(on_path), "PATH"))
    candidates.append((Path("/usr/local/cuda/bin") / name, "/usr/local/cuda"))
    for base in _nvidia_wheel_dirs():
        for candidate in sorted([*base.glob(f"*/bin/{name}"), *base.glob(f"*/{name}/{name}")]):
            candidates.append((candidate, f"{CUDA_TOOL_WHEELS.get(name, 'nvidia')} wheel"))
    for path, source in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return Found(path, source, f"{name} at {path} ({source})")
    return None


def nvidia_wheel_include_dirs() -> list[Path]:
    """Header dirs of the CUDA library wheels torch depends on (cuBLAS, cuSPARSE, ...): torch's
    CUDA headers include them, and a machine with only nvcc from a wheel has them nowhere else."""
    return sorted(d for base in _nvidia_wheel_dirs() for d in base.glob("*/include") if d.is_dir())


# ---------------------------------------------------------------- CUTLASS, ninja, host compiler

def cutlass_include_dir() -> Path | None:
    """CUTLASS/CuTe headers from the nvidia-cutlass wheel, found without importing cutlass_library."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        include = Path(location) / "source" / "include"
        if (include / "cutlass" / "cutlass.h").is_file():
            return include
    return None


def cutlass_version(include: Path) -> str:
    text = (include / "cutlass" / "version.h").read_text(errors="replace")
    parts = [re.search(rf"#define CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "unknown"


def find_ninja() -> Path | None:
    """The binary of the `ninja` PyPI package, else ninja on PATH."""
    try:
        import ninja  # the PyPI package: tiny, exposes BIN_DIR
        candidate = Path(ninja.BIN_DIR) / "ninja"
        if os.access(candidate, os.X_OK):
            return candidate
    except ImportError:
        pass
    on_path = shutil.which("ninja")
    return Path(on_path) if on_path else None


def tool_version(tool: Path, flag: str = "--version") -> str:
    """The first line `tool flag` prints, or 'unknown' when it does not run or fails."""
    try:
        out = subprocess.run([str(tool), flag], capture_output=True, text=True, errors="replace", check=False,
                             timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    first = (out.stdout or out.stderr).strip().splitlines()
    return first[0] if first and out.returncode == 0 else "unknown"


def find_host_cxx() -> Path | None:
    """The host C++ compiler for the binding: $CXX, else c++ / g++ / clang++ on PATH."""
    for name in filter(None, (os.environ.get("CXX"), "c++", "g++", "clang++")):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


# ---------------------------------------------------------------- torch, read from its files

@dataclass(frozen=True)
class TorchInfo:
    version: str
    cuda: str | None  # torch.version.cuda: None for a CPU-only build
    root: Path

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"


def torch_info() -> TorchInfo | None:
    """torch's version and CUDA version from torch/version.py, without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent
    try:
        tree = ast.parse((root / "version.py").read_text())
    except (OSError, SyntaxError):
        return None
    values = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return TorchInfo(str(values.get("__version__", "unknown")), values.get("cuda"), root)


# ---------------------------------------------------------------- machine

def python_abi() -> str:
    return sysconfig.get_config_var("SOABI") or "unknown"


def gpus() -> list[tuple[str, str]]:
    """(name, compute capability like '9.0') per GPU, from nvidia-smi; [] without a GPU or driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    rows = [line.rsplit(",", 1) for line in out.stdout.strip().splitlines() if "," in line]
    return [(name.strip(), cap.strip()) for name, cap in rows]


def gpu_compute_caps() -> list[str]:
    return [cap for _, cap in gpus()]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def default_jobs() -> int:
    """min(cores, available memory / 4 GiB), at least 1."""
    memory = available_memory()
    by_memory = memory // MEMORY_PER_TU if memory is not None else cpu_count()
    return max(1, min(cpu_count(), by_memory))
