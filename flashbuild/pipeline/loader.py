"""Import a built extension as a Python module (torch first: the extension links against it).

A process may load a build again after it was rebuilt (issue 17: `flashbuild watch` stays one warm
process across rebuilds), and never gets the stale copy. The dynamic loader holds one copy per
file name: dlopen of a path it already loaded returns that copy, even after the link edge renamed
a new file over it. So the first copy a process loads is the extension file under the build's
module name, and a rebuilt one is loaded from a file of its own beside it, named by its content
(`<module>.<digest>.so`: a hard link to the new file, or a private copy where links are refused),
under a module name of its own, `<module>_<digest>`. That name is also its torch.library namespace
(api.namespace_of), so two builds of one key share no file, no module and no op. A relink to the
same bytes (a touched header whose objects compile the same) is the module already loaded.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..safe_io import sha256_of as digest_of
from . import cache

DIGEST_CHARS = 8        # of the sha256 in a rebuilt copy's file and module name
SNAPSHOT_MAX_AGE = 60.0  # seconds: older copies of earlier builds are removed when a new one is made


@dataclass
class Loaded:
    """What this process loaded from one extension path: the file's fingerprint when it was loaded,
    and each build (sha256 of the file) it loaded from that path, as a module."""

    fingerprint: tuple[int, int, int]
    digest: str | None                  # the build at `fingerprint` (None: relinked while it loaded)
    modules: dict[str, ModuleType]      # digest -> module; the first load's is the module of the plain name
    first: ModuleType


_loaded: dict[Path, Loaded] = {}


def fingerprint(path: Path) -> tuple[int, int, int]:
    """What tells one build of a file from the next: a relink renames a new file over the old one
    (new inode), and its mtime and size move too."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def _exec(path: Path, module_name: str, spec_name: str | None = None) -> ModuleType:
    """Load the extension file `path`, whose init function is PyInit_<module_name>, as the module
    spec `spec_name` (default: module_name). Python finds the init function by the spec name's last
    component, and pybind11 (3.x: multi-phase init) keeps a module per spec name for the life of the
    process: the same spec name is the module created first, whatever file it comes from. So a
    rebuilt extension is loaded as `<unique>.<module_name>`."""
    spec_name = spec_name or module_name
    loader = importlib.machinery.ExtensionFileLoader(spec_name, str(path))
    spec = importlib.util.spec_from_file_location(spec_name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def snapshot(path: Path, module_name: str) -> tuple[Path, str]:
    """The file now at `path`, as `<module>.<digest>.so` beside it (a hard link: the link edge's next
    rename leaves it alone), and its sha256. Copies of earlier builds older than SNAPSHOT_MAX_AGE
    are removed (a process that loaded one keeps its mapping)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.load")
    temporary.unlink(missing_ok=True)
    with cache.private_umask():
        try:
            os.link(path, temporary)
        except OSError:  # a file system without hard links
            shutil.copyfile(path, temporary)
    digest = digest_of(temporary)
    final = path.with_name(f"{module_name}.{digest[:DIGEST_CHARS * 2]}.so")
    os.replace(temporary, final)
    temporary.unlink(missing_ok=True)  # rename leaves both names when they are links of one file
    _prune(path.parent, module_name, keep=final)
    return final, digest


def _prune(build_dir: Path, module_name: str, keep: Path) -> None:
    now = time.time()
    for old in [*build_dir.glob(f"{module_name}.*.so"), *build_dir.glob(f".{module_name}.so.*.load")]:
        try:
            if old != keep and now - old.lstat().st_ctime > SNAPSHOT_MAX_AGE:
                old.unlink()
        except OSError:
            continue


def load_extension(path: Path, module_name: str, *, fresh: bool = True) -> ModuleType:
    """The module in `path`, whose init function is PyInit_<module_name>. Memoized per path and
    build: the same file is the module already loaded. A file rebuilt since this process loaded it
    is loaded fresh (see the module's docstring) or is the module of the same bytes loaded before;
    with fresh=False (a tree whose Python package imports its extension by name, once) it is an
    ImportError naming the fix, never the stale module."""
    path = Path(path).resolve()
    seen = _loaded.get(path)
    now = fingerprint(path)
    if seen is not None and now == seen.fingerprint:
        return seen.modules.get(seen.digest, seen.first)
    if seen is not None and not fresh:
        raise ImportError(f"{path} was rebuilt after this process loaded it as {module_name}, whose package "
                          f"imports it by name once per process: rerun in a new process (`flashbuild watch` "
                          f"runs each round of an external tree's build in one)")
    other = next((p for p, loaded in _loaded.items() if p != path and loaded.first.__name__ == module_name), None)
    if other is not None and not fresh:
        # A second build of one tree's extension: pybind11 would hand back the first module under that name
        # (the other build's kernels, silently), and flash-attn 3's _C would register torch.ops.flash_attn_3 a
        # second time, which aborts the process.
        raise ImportError(f"{path} is another build of {module_name}, and this process already loaded {other} "
                          f"under that name: a tree's package imports its extension by name once per process and "
                          f"registers its ops then, so one process holds one build of it. Load this build in a new "
                          f"process (`flashbuild run --source TREE --profile NAME SELECTION -- python3 ...` runs one "
                          f"with that slice on its import path), or build one slice that holds what both selections "
                          f"hold")
    import torch  # noqa: F401  (loads libc10/libtorch, which the extension needs)

    if seen is None:
        digest = digest_of(path)
        module = _exec(path, module_name)
        if fingerprint(path) != now:  # relinked while it loaded: which build it holds is unknown
            digest = None
        sys.modules[module_name] = module
        _loaded[path] = Loaded(now, digest, {digest: module} if digest else {}, module)
        return module
    copy, digest = snapshot(path, module_name)
    seen.fingerprint, seen.digest = now, digest  # relinked again since `now`: the next call sees it
    module = seen.modules.get(digest)  # the same bytes as a build loaded before
    if module is None:
        cache.check_loadable(copy)
        name = f"{module_name}_{digest[:DIGEST_CHARS]}"
        module = _exec(copy, module_name, spec_name=f"{name}.{module_name}")
        module.__name__ = name  # its own module name and torch.library namespace
        sys.modules[module.__name__] = module
        seen.modules[digest] = module
    sys.modules[module_name] = module  # an import by the build's name gets the current build
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
