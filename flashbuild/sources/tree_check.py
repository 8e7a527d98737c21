"""A kernel tree checked against its profile before any compiler runs: the tree a build reads
(`resolve_source`: a directory, or a release spec fetched and unpacked), every file and dir the profile
requires, the release its version file names, and the CUTLASS it would build with (and its version,
when the profile pins one). Every refusal names the missing file or the found version, the profile
key that asks for it, and the fix."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .. import env
from ..errors import SelectionError
from . import profile as profiles
from . import release
from . import releases as releases_module
from .profile import Profile


def default_source(profile: Profile) -> Path:
    """The built-in profile's tree is flashbuild's own root; other trees are given with --source."""
    return env.repo_root()


def resolve_source(profile: Profile, source: str | os.PathLike | None) -> Path:
    """The tree a build reads, checked against the profile: it exists, is a directory, and holds
    every file the profile requires. Raises naming the missing file and the profile key."""
    if source is None:
        if not profile.builtin:
            raise SelectionError(f"--profile {profile.name} builds an external tree: pass its root with --source PATH "
                                 f"(e.g. an unpacked flash-attn sdist)")
        return default_source(profile)
    text = os.fspath(source)
    if any(c in text for c in "\n\r\0"):
        raise SelectionError(f"--source {text!r}: holds a newline or NUL; pass a plain directory path")
    if release.is_spec(text):  # flash-attn==2.8.3: that release's sdist, fetched, checked, unpacked
        text = str(release.fetch(text))
    root = Path(text).expanduser().resolve()
    if not root.is_dir():
        raise SelectionError(f"--source {text}: {'not a directory' if root.exists() else 'does not exist'}; "
                             f"pass the root of a {profile.name} tree")
    check_tree(profile, root)
    return root


def check_tree(profile: Profile, root: Path) -> None:
    missing = [rel for rel in profile.required if not (root / rel).is_file()]
    missing += [rel for rel in profile.api_sources if not (root / rel).is_file() and rel not in missing]
    missing_dirs = [rel for rel in profile.include_dirs if not (root / rel).is_dir()]
    missing += [s.file + " (profile key support.file)" for s in profile.support if not (root / s.file).is_file()]
    no_cutlass = profile.cutlass != "wheel" and cutlass_override(profile) is None \
        and not (root / profile.cutlass / "cutlass" / "cutlass.h").is_file()
    replaced = [g.replaces for g in profile.generated if g.replaces and not (root / g.replaces).is_file()]
    problems = []
    if missing:
        problems.append(f"missing file{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                        f"(profile keys tree.required / extension.sources)")
    if missing_dirs:
        problems.append(f"missing dir{'s' if len(missing_dirs) > 1 else ''} {', '.join(missing_dirs)} "
                        f"(profile key tree.include_dirs)")
    if replaced:
        problems.append(f"no {', '.join(replaced)} to overlay (profile key generated.replaces)")
    if no_cutlass:
        problems.append(f"missing file {profile.cutlass}/cutlass/cutlass.h (profile key tree.cutlass"
                        + (f"; or set {profile.cutlass_env} to a CUTLASS include dir)" if profile.cutlass_env else ")"))
    if problems:
        hint = _release_hint(profile, root, layout=bool(missing or missing_dirs or replaced))
        raise SelectionError(f"--source {root} does not match profile {profile.name} ({profile.path}): "
                             f"{'; '.join(problems)}; check that --source is the tree's root and that its release "
                             f"has this layout{hint}")
    check_version(profile, root)
    check_cutlass(profile, root)


def _release_hint(profile: Profile, root: Path, layout: bool = True) -> str:
    """For a release line the tree's version is not in: which release the version is, to pass instead. For one that
    serves the version: what it serves (a tree of another layout can carry the same version, e.g. hopper/ of
    flash-attention v2.7.x says 3.0.0.b1 like v2.8.x), and where a release is added; nothing when the tree lacks no
    file of the layout (`layout` false: only its CUTLASS, which the error names with its fix)."""
    if profile.release is None or profile.version_file is None:
        return ""
    found = tree_version(profile, root)
    if not profile.release.serves(found):
        return f" ({releases_module.instead(profiles.releases(profile.name), profile.release, found, root)})"
    if not layout:
        return ""
    return (f" ({profile.name} serves {profile.release.served}; a tree of another layout with version {found} is not "
            f"served: use a tree of a served release, or add this layout as a release (docs/releases.md); see "
            f"flashbuild profiles --source {root})")


def release_matches(found: str | None, wanted: str) -> bool:
    """Whether release `found` ("2.8.3", "2.8.3+cu12") is `wanted` ("2.8": any 2.8.x; "2.8.3": that one)."""
    parts = wanted.split(".")
    return found is not None and re.split(r"[.+-]", found)[:len(parts)] == parts


def tree_version(profile: Profile, root: Path) -> str | None:
    """The tree's release as its version file says it (profile key tree.version), or None."""
    from .. import safe_io
    try:  # a regular file of a sane size only: a FIFO there would block, /dev/zero never end
        text = safe_io.read_bytes(root / profile.version_file, profiles.VERSION_FILE_MAX).decode("utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(profile.version_pattern, text, re.MULTILINE)
    return match.group(1) if match else None


def check_version(profile: Profile, root: Path) -> None:
    """A tree of another release than the profile describes is refused before compiling: its layout,
    templates and switches may differ (profile key tree.version; a release line's versions)."""
    if profile.version_file is None:
        return
    found = tree_version(profile, root)
    release = profile.release
    # A release line's versions stand in for the profile's tree.version.accepts.
    if release.serves(found) if release is not None else release_matches(found, profile.version_accepts):
        return
    says = f"{profile.version_file} says " + (f"release {found}" if found else
                                               f"no version (nothing matches {profile.version_pattern})")
    if release is not None:
        raise SelectionError(f"--source {root}: {says}, and {profile.name} serves {release.range_text} "
                             f"({release.served}; {release.path}); "
                             f"{releases_module.instead(profiles.releases(profile.name), release, found, root)}")
    raise SelectionError(
        f"--source {root}: {says}, and "
        f"profile {profile.name} ({profile.path}) describes release {profile.version_accepts}"
        f"{'.x' if profile.version_accepts.count('.') < 2 else ''} (profile key tree.version); pass a tree of that release, or a "
        f"profile written for this one (flashbuild profiles --source {root} says which)")


def cutlass_override(profile: Profile) -> Path | None:
    """The CUTLASS include dir the profile's environment variable names, if it is set."""
    value = os.environ.get(profile.cutlass_env, "") if profile.cutlass_env else ""
    return Path(value).expanduser().resolve() if value.strip() else None


def cutlass_include(profile: Profile, root: Path) -> Path | None:
    if profile.cutlass == "wheel":
        return env.cutlass_include_dir()
    return cutlass_override(profile) or root / profile.cutlass


def cutlass_version_of(include: Path) -> str | None:
    """"4.3.4" from include/cutlass/version.h, or None when it cannot be read."""
    try:
        text = (include / "cutlass" / "version.h").read_text(errors="replace")
    except OSError:
        return None
    parts = [re.search(rf"#define\s+CUTLASS_{part}\s+(\d+)", text) for part in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def check_cutlass(profile: Profile, root: Path) -> None:
    """The CUTLASS a tree's build would use is there and is the version the tree pins (when the
    profile names one): else an error naming what was found, what the tree expects and the fix."""
    if profile.cutlass == "wheel":
        return
    include = cutlass_include(profile, root)
    where = f"{profile.cutlass_env}={include}" if cutlass_override(profile) else f"{include} (profile key tree.cutlass)"
    fix = (f"point {profile.cutlass_env} at the include/ dir of CUTLASS {profile.cutlass_version or ''}".rstrip()
           + f" (export {profile.cutlass_env}=/path/to/cutlass/include)" if profile.cutlass_env
           else "check --source")
    if not (include / "cutlass" / "cutlass.h").is_file():
        raise SelectionError(f"CUTLASS for {profile.name}: {where} has no cutlass/cutlass.h; {fix}")
    if profile.cutlass_version is None:
        return
    found = cutlass_version_of(include)
    wanted = profile.cutlass_version.split(".")
    if not release_matches(found, profile.cutlass_version):
        raise SelectionError(f"CUTLASS for {profile.name}: {where} is CUTLASS "
                             f"{found or 'of unknown version (no readable cutlass/version.h)'}, and the tree expects "
                             f"{profile.cutlass_version}{'.x' if len(wanted) == 2 else ''}"
                             f"{' (' + profile.cutlass_pin + ')' if profile.cutlass_pin else ''}; {fix}")
