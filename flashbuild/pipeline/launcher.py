"""Compiler caches as the --launcher (ccache, sccache): what they need to hit across build dirs.

Both cache nvcc compiles with the build's `-MD -MF $out.d` (measured with ccache 4.14.2 and sccache
0.16.0 on nvcc 13.0: the depfile of a cache hit names the new object, so ninja's deps stay right).
But flashbuild passes absolute paths (`-I<build dir>/generated`, the generated .cu) and ccache hashes
the working directory of an nvcc compile, so by default a fresh build dir at another path misses.
For ccache, CCACHE_BASEDIR (paths under it become relative) and CCACHE_NOHASHDIR fix that; they are
given to ninja (so to every compile) as defaults, never over a value the user set; the builder does it, so
`flashbuild.load()` gets them as the CLI does. sccache has no such switch for nvcc's
device steps (its cicc step misses at another path): give CI a fixed --build-dir path instead.
docs/ci.md has the measurements.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_environment(launcher: str | None, build_dir: Path, tree: Path) -> dict[str, str]:
    """The environment defaults that let `launcher` hit across build dirs under one base dir."""
    if not launcher or Path(launcher).name != "ccache":
        return {}
    build_dir = Path(build_dir).absolute()
    base = Path(os.path.commonpath([build_dir, Path(tree).absolute()]))
    if base == Path(base.anchor):  # ccache's docs: never / (system headers would be rewritten too)
        # The tree and the cache share no parent but /: the build dir alone as the base, so that its own
        # paths (the generated .cu, -I<build dir>/generated) are relative and a build dir at a new path hits;
        # the tree's paths stay absolute, the same for every build of it.
        base = build_dir
        if base == Path(base.anchor):
            return {}
    return {"CCACHE_BASEDIR": str(base), "CCACHE_NOHASHDIR": "1"}


def ninja_environment(launcher: str | None, build_dir: Path, tree: Path, **extra: str) -> dict[str, str]:
    """The environment ninja runs in: this process's, the launcher's defaults where unset, and extra."""
    defaults = {k: v for k, v in cache_environment(launcher, build_dir, tree).items() if k not in os.environ}
    return {**os.environ, **defaults, **extra}
