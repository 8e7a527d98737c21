"""Import a built extension as a Python module (torch first: the extension links against it)."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_loaded: dict[Path, tuple[tuple[int, int, int], ModuleType]] = {}


def fingerprint(path: Path) -> tuple[int, int, int]:
    """What tells one build of a file from the next: a relink renames a new file over the old one
    (new inode), and its mtime and size move too."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def load_extension(path: Path, module_name: str) -> ModuleType:
    """The module in `path`, whose init function is PyInit_<module_name>. Memoized per path: a
    shared library cannot be loaded twice into one process, so a rebuilt extension of the same key
    needs a new process. A rebuild after this process loaded the path is an ImportError, never the
    stale module (issue 17: a stale extension is never used after a rebuild)."""
    path = Path(path).resolve()
    if path in _loaded:
        loaded_print, module = _loaded[path]
        if fingerprint(path) != loaded_print:
            raise ImportError(f"{path} was rebuilt after this process loaded it as {module_name}; a process holds "
                              f"one copy of an extension: rerun in a new process (`flashbuild watch` runs each "
                              f"round in one)")
        return module
    import torch  # noqa: F401  (loads libc10/libtorch, which the extension needs)

    print_before = fingerprint(path)
    loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
    spec = importlib.util.spec_from_file_location(module_name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[module_name] = module
    _loaded[path] = (print_before, module)
    return module


def load_package(build_dir: Path, python_path: list[Path], package: str, extension: str) -> ModuleType:
    """Import a tree's Python package (e.g. flash_attn) so that it picks up the extension built in
    `build_dir` (e.g. flash_attn_2_cuda): build_dir, then the tree's Python dirs, go first on
    sys.path. Raises ImportError when another copy of the package or extension is already imported
    from elsewhere, since a process holds one module of a name: run in a fresh process."""
    import torch  # noqa: F401  (the extension links against it)

    build_dir = Path(build_dir).resolve()
    for name, allowed in ((extension, [build_dir]), (package, [Path(p).resolve() for p in python_path])):
        module = sys.modules.get(name)
        origin = Path(getattr(module, "__file__", None) or ".").resolve() if module is not None else None
        if origin is not None and not any(origin.is_relative_to(place) for place in allowed):
            raise ImportError(f"{name} is already imported from {origin}; this process cannot load the one in "
                              f"{allowed[0]}: run in a fresh process (`flashbuild run -- ...`)")
    for entry in reversed([build_dir, *python_path]):
        if str(entry) in sys.path:
            sys.path.remove(str(entry))
        sys.path.insert(0, str(entry))
    if sys.pycache_prefix is None:  # the tree is read, never written: its bytecode goes to the build dir
        sys.pycache_prefix = str(build_dir / "pycache")
    module = importlib.import_module(package)
    loaded = sys.modules.get(extension)
    if loaded is not None and Path(loaded.__file__).resolve().parent != build_dir:
        raise ImportError(f"{package} imported {extension} from {loaded.__file__}, not from {build_dir}; "
                          f"uninstall the other copy or run in a fresh process")
    return module
