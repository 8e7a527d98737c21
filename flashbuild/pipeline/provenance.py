"""Where a build's objects came from, as a digest: the sources it read that are not in the toolkit
(our kernels/ and templates/, or an external tree's include dirs and API sources, and the profile)
and the toolkit versions beside plan.versions (CUTLASS). Shards record them and link compares them;
a linked build dir records them so that load() can tell it is still this tree's."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

from .. import env
from . import graph
from .loader import digest_of
from .plan import Plan
from .toolchain import tree_root


def _hash_files(digest, root: Path, paths: Iterable[Path]) -> None:
    for path in sorted(paths):
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())


def tree_digest(plan: Plan) -> str:
    """A digest of every source the build reads that is not in the toolkit: our kernels/ and
    templates/ (or an external tree's include dirs and API sources), and the profile."""
    digest = hashlib.sha256()
    profile = plan.profile
    if profile.builtin:
        for sub in ("kernels", "templates"):
            base = env.repo_root() / sub
            _hash_files(digest, env.repo_root(), base.rglob("*"))
    else:
        root = tree_root(plan)
        for sub in profile.include_dirs:
            _hash_files(digest, root, (root / sub).rglob("*"))
        _hash_files(digest, root, (root / s for s in profile.api_sources))
        _hash_files(digest, env.repo_root(), (env.templates_dir() / "profiles").rglob("*"))
    digest.update(profile.path.read_bytes())
    return digest.hexdigest()[:16]


def toolkit(plan: Plan, tools: graph.Toolchain) -> dict[str, str]:
    """The versions beside plan.versions that change an object: CUTLASS."""
    cutlass = next((d for d in tools.include_dirs if (d / "cutlass" / "version.h").is_file()), None)
    return {"cutlass": env.cutlass_version(cutlass) if cutlass else "missing"}


def sha256(path: Path) -> str:
    """A file's sha256, read in blocks (an extension can be hundreds of MB): the loader's digest."""
    return digest_of(path)
