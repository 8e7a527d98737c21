"""Import a built extension as a Python module (torch first: the extension links against it)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_loaded: dict[Path, ModuleType] = {}


def load_extension(path: Path, module_name: str) -> ModuleType:
    """The module in `path`, whose init function is PyInit_<module_name>. Memoized per path: a
    shared library cannot be loaded twice into one process, so a rebuilt extension of the same key
    needs a new process."""
    path = Path(path).resolve()
    if path in _loaded:
        return _loaded[path]
    import torch  # noqa: F401  (loads libc10/libtorch, which the extension needs)

    loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
    spec = importlib.util.spec_from_file_location(module_name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[module_name] = module
    _loaded[path] = module
    return module
