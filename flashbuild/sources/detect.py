"""Which profile and release a kernel tree is, read from its files and its version string.

Every profile of configs/profiles (but our own kernels) is tried, each release line of it
(configs/profiles/releases/<profile>/) in turn: a release matches when the tree has every file it
requires (tree.required, extension.sources, include dirs, support files, overlaid headers) and its
version string falls in the release's versions. Each candidate that does not match says why, so that
`flashbuild profiles --source TREE` can show it. Nothing here writes anything or runs a compiler; the
CUTLASS a tree pins is checked later (tree_check.check_cutlass), once the release is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import SelectionError
from . import profile as profiles
from . import tree_check
from . import release as release_specs
from . import releases as releases_module


@dataclass(frozen=True)
class Candidate:
    """One profile (with a release line, or a profile that has none) tried against a tree."""

    name: str                    # "flash-attn-2@2.6", or "my-tree" for a profile without releases
    family: str                  # "flash-attn-2"
    served: str                  # what the release serves ("" for a profile without releases)
    version: str | None          # the version string the tree has, as this profile reads it
    problems: tuple[str, ...]    # why it does not match; () when it does
    looks_like: bool             # the tree has the files every release of the family requires
    resemblance: float = 0.0     # the share of those files it has (a tree of another kind: few)

    @property
    def matches(self) -> bool:
        return not self.problems


def file_problems(profile: profiles.Profile, root: Path) -> list[str]:
    """The files and dirs `profile` requires that `root` lacks (its CUTLASS is not looked at)."""
    missing = [rel for rel in (*profile.required, *profile.api_sources) if not (root / rel).is_file()]
    missing += [s.file for s in profile.support if not (root / s.file).is_file()]
    missing += [g.replaces for g in profile.generated if g.replaces and not (root / g.replaces).is_file()]
    missing += [rel + "/" for rel in profile.include_dirs if not (root / rel).is_dir()]
    return [f"no {rel}" for rel in dict.fromkeys(missing)]


def _markers(family: list[profiles.Profile]) -> set[str]:
    """Files every release of a family requires: a tree holding them all is of that family."""
    sets = [set(p.required) | set(p.api_sources) for p in family]
    return set.intersection(*sets) if sets else set()


def candidates(root: Path) -> list[Candidate]:
    """Every profile and release tried against `root`, families in name order, releases oldest first."""
    out = []
    for name in profiles.available():
        if name == profiles.BUILTIN:
            continue
        lines = profiles.releases(name)
        family = [profiles.load(r.id) for r in lines] if lines else [profiles.load(name)]
        markers = _markers(family)
        present = sum((root / m).is_file() for m in markers)
        resemblance = present / len(markers) if markers else 0.0
        looks_like = bool(markers) and present == len(markers)
        for tree, line in zip(family, lines or (None,) * len(family)):
            problems = file_problems(tree, root)
            problems += [f"has {rel} (a later layout)" for rel in (line.absent if line else ()) if (root / rel).exists()]
            version = tree_check.tree_version(tree, root) if tree.version_file else None
            if tree.version_file and version is None:
                problems.append(f"{tree.version_file}: no version (nothing matches {tree.version_pattern})")
            elif line is not None and not line.serves(version):
                problems.append(f"version {version} is not {line.range_text}")
            elif line is None and tree.version_accepts and not tree_check.release_matches(version, tree.version_accepts):
                problems.append(f"version {version} is not {tree.version_accepts}.x")
            out.append(Candidate(tree.name, name, line.served if line else "", version, tuple(problems), looks_like,
                                 resemblance))
    return out


def choose(source: str | None, profile: str | None) -> str | None:
    """The profile a build of `source` uses: `profile` when it names a release, a path or a profile
    without releases; else the release (of `profile`'s, or of any profile's) the tree is. A source that
    is not a directory is left to tree_check.resolve_source, which names it."""
    if source is None:
        return profile
    text = str(profile) if profile is not None else None
    if text is not None and (releases_module.split_name(text)[1] is not None or text.endswith(".toml")
                             or "/" in text or not profiles.releases(text)):
        return text
    if any(c in str(source) for c in "\n\r\0"):
        return text or profiles.BUILTIN  # resolve_source refuses it, naming it
    if release_specs.is_spec(str(source)):  # flash-attn==2.6.3: the release's tree (fetched once, cached) names its line
        source = release_specs.fetch(str(source))
    root = Path(source).expanduser().resolve()
    if not root.is_dir():
        if text is None:
            raise SelectionError(f"--source {source}: {'not a directory' if root.exists() else 'does not exist'}; "
                                 f"pass the root of a kernel tree (flashbuild profiles lists what is served)")
        return text
    try:
        return detect(root, family=text)
    except SelectionError:
        # An explicit --profile whose own layout and version the tree has (a profile whose base
        # checks no version) is used as it is; anything else is the detection's error.
        if text is not None and _base_fits(profiles.load(text), root):
            return text
        raise


def _base_fits(tree: profiles.Profile, root: Path) -> bool:
    if file_problems(tree, root):
        return False
    return tree.version_file is None or tree_check.release_matches(tree_check.tree_version(tree, root),
                                                                 tree.version_accepts)


def detect(root: Path, family: str | None = None) -> str:
    """The profile name (with its release) that `root` is; `family` restricts it to one profile's
    releases (an explicit --profile without a release). Raises naming the tree's version, the nearest
    served release and what differs, or, for a tree of no profile, what each profile looks for."""
    found = candidates(root)
    if family is not None:
        found = [c for c in found if c.family == family]
    matching = [c for c in found if c.matches]
    if len(matching) == 1:
        return matching[0].name
    hint = f"see flashbuild profiles --source {root}"
    if len(matching) > 1:
        raise SelectionError(f"--source {root}: matches {', '.join(c.name for c in matching)}; pick one with "
                             f"--profile ({hint})")
    # A release that serves the tree's version and lacks only files: tree_check.check_tree names them
    # with the profile keys that require them.
    # (A tree of another kind may carry a stray version file, e.g. the flash-attn sdist's hopper/__init__.py:
    # such a release must have most of its family's files too.)
    served = [c for c in found if c.version and _serves(c) and c.resemblance >= 0.5
              and all(p.startswith("no ") for p in c.problems)]
    if len(served) == 1:
        return served[0].name
    alike = sorted((c for c in found if c.looks_like or (c.version and _serves(c) and c.resemblance >= 0.5)),
                   key=lambda c: -c.resemblance)
    if not alike:
        what = "; ".join(f"{c.family} needs {', '.join(p[3:] for p in c.problems if p.startswith('no '))}"
                         for c in _last_of_each(found)) or "no profiles"
        raise SelectionError(f"--source {root}: is no kernel tree flashbuild has a profile for ({what}); pass the "
                             f"root of a flash-attn sdist or of a flash-attention checkout ({hint})")
    name = alike[0].family
    alike = [c for c in alike if c.family == name]
    lines = profiles.releases(name)
    version = next((c.version for c in alike if c.version), None)
    near = releases_module.nearest(lines, version)
    nearest = next((c for c in found if near and c.name == near.id), alike[-1])
    said = profiles.load(nearest.name).version_file
    listed = ", ".join(f"{r.name} ({r.range_text})" for r in lines)
    raise SelectionError(
        f"--source {root}: a {name} tree ({said} says {version or 'no version'}) that no release of {name} "
        f"serves (releases: {listed or 'its profile only'}); the nearest served release is {nearest.name}"
        f"{' (' + nearest.served + ')' if nearest.served else ''}, and this tree differs from it: "
        f"{'; '.join(nearest.problems)}. Use a tree of a served release, or add this one "
        f"(docs/releases.md); {hint}")


def _serves(candidate: Candidate) -> bool:
    """Whether the candidate's release serves the tree's version (its problems name no version)."""
    return not any(p.startswith("version ") or ": no version" in p for p in candidate.problems)


def _last_of_each(found: list[Candidate]) -> list[Candidate]:
    """The newest release of each family: what a tree of that family would look like today."""
    last: dict[str, Candidate] = {}
    for c in found:
        last[c.family] = c
    return list(last.values())


def describe(root: Path) -> str:
    """`flashbuild profiles --source TREE`: which profile and release matches, and why each other does not."""
    lines = [f"tree {root}:"]
    found = candidates(root)
    for c in found:
        verdict = "MATCHES" if c.matches else "no: " + "; ".join(c.problems)
        if not c.looks_like and len(c.problems) > 2:  # another kind of tree: the first file it lacks says so
            verdict = f"no: not a {c.family} tree ({c.problems[0]} and {len(c.problems) - 1} more)"
        lines.append(f"  {c.name:<30} {verdict}")
    matching = [c for c in found if c.matches]
    if len(matching) == 1:
        lines.append(f"detected: {matching[0].name} ({matching[0].served or 'profile ' + matching[0].family}); "
                     f"--source {root} picks it without --profile")
    else:
        try:
            near = detect(root)
        except SelectionError as exc:
            lines.append(f"detected: none: {exc}")
        else:  # the version is a release's, and the tree lacks files of its layout (another layout, or incomplete)
            lines.append(f"detected: none: its version is {near}'s, but it lacks files of that release's layout "
                         f"(above): an incomplete tree, or another layout with the same version; a build names them "
                         f"(add a layout as a release: docs/releases.md)")
    return "\n".join(lines)


def listing() -> str:
    """`flashbuild profiles`: every profile and the releases each serves."""
    lines = []
    for name in profiles.available():
        tree = profiles.load(name)
        lines.append(f"{name}: {tree.description}")
        if tree.builtin:
            lines.append("  flashbuild's own kernels (kernels/): no --source")
        for line in profiles.releases(name):
            lines.append(f"  {line.id:<30} {line.range_text:<22} {line.served}")
    return "\n".join(lines)
