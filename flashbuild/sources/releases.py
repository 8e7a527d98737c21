"""Release lines of a profile: configs/profiles/releases/<profile>/<release>.toml.

A profile file (configs/profiles/<profile>.toml) describes the newest layout of a tree. Each release
file beside it names the versions it serves and the keys it changes in that profile, so that a release
is a few lines of data and the differences between releases can be read side by side:

    [release]
    versions = { from = "2.6", below = "2.7" }    # the tree's version string must fall here
    served = "flash-attn 2.6.2 - 2.6.3 sdists"     # what a user knows the release as
    remove = ["features.disable.softcap",           # keys of the profile this release does not have,
              "switches.macro[SOFTCAP_SWITCH]"]     # or one entry of a list: key[NAME]
    absent = ["csrc/flash_attn/src/namespace_config.h"]  # files a tree of this release does not have
    [profile]                                       # keys replaced (tables merge, keyed lists merge by
    description = "..."                             # key, anything else replaces)
    tree.required = ["...", "..."]

The keyed lists of tables (KEYED: [[switches.macro]] by name and site, [[switches.device]] by launcher
and traits, [[generated]] by file) merge
entry by entry: a release's entry replaces the profile's entry of the same key and a new key is
appended, so that a release changes one switch or one generated file without restating the others.
`key[NAME]` in release.remove drops the entry of that key (a switch site is NAME:SITE, e.g.
switches.macro[BOOL_SWITCH:Deterministic_]) or, in a list of strings, that string
(switches.features[deterministic]). Every other list replaces the profile's.

`flash-attn-2@2.6` (--profile, the selection, a build's manifest) names the profile with release 2.6
applied. Nothing here reads a tree; sources/detect.py matches a tree against these.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SelectionError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

SEPARATOR = "@"
RELEASE_NAME = re.compile(r"[0-9][0-9A-Za-z.]*(-[0-9A-Za-z]+)*")   # 2.6, 3.0.0b1, 3.0.0-nopackage
# A version as trees write it: "2.5.9.post1", "3.0.0.b1", "2.8.3+cu12torch2.4" (a local part is ignored).
VERSION = re.compile(r"(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc)\.?(\d+))?(?:[.-]?post\.?(\d+))?(?:\+[\w.]+)?")
_PRE = {"a": 0, "b": 1, "rc": 2, None: 3}  # a pre-release sorts before its release
# release.remove: a dotted key, maybe ending in [NAME] (an entry of a list: a keyed table or a string)
REMOVE_KEY = re.compile(r"[\w-]+(\.[\w-]+)*(\[[\w.:/<>{}, -]+\])?")  # a device entry: launcher:traits<...>
# Lists of tables that merge by key (the key fields, joined by ":" where more than one is set).
KEYED = {"switches.macro": ("name", "site"), "switches.device": ("launcher", "traits"), "generated": ("file",)}


def parse_version(text: str) -> tuple | None:
    """A sortable key of a version string, or None when it is not one: (release parts padded to 4,
    pre-release rank, pre number, post number)."""
    match = VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        return None
    parts = tuple(int(p) for p in match.group(1).split("."))
    return (parts + (0,) * (4 - len(parts)))[:4] + (_PRE[match.group(2)], int(match.group(3) or 0),
                                                    int(match.group(4) or 0))


@dataclass(frozen=True)
class Release:
    """One release line of a profile, as its file says it."""

    profile: str          # the profile it applies to ("flash-attn-2")
    name: str             # "2.6": the file's stem, and the part after @
    path: Path
    lowest: str           # versions.from: the first version served
    below: str            # versions.below: the first version not served
    served: str           # what a user knows it as ("flash-attn 2.6.x sdists")
    remove: tuple[str, ...]
    absent: tuple[str, ...]   # files (relative to the tree) that tell a later layout from this one
    overrides: dict = field(hash=False, compare=False)  # the [profile] table: keys replaced or merged
    extends: str | None = None  # release.extends: another line of the profile applied first (its name)
    parent: Release | None = field(default=None, hash=False, compare=False)  # that line, once releases() found it

    @property
    def id(self) -> str:
        return f"{self.profile}{SEPARATOR}{self.name}"

    def serves(self, version: str | None) -> bool:
        key = parse_version(version) if version else None
        return key is not None and parse_version(self.lowest) <= key < parse_version(self.below)

    @property
    def range_text(self) -> str:
        return f">= {self.lowest}, < {self.below}"


def releases_dir(profiles_dir: Path, profile: str) -> Path:
    return profiles_dir / "releases" / profile


def read_release(path: Path, profile: str) -> Release:
    """Parse and check one release file; an error names the file, the key and the fix."""
    def bad(key: str, expected: str, found: Any) -> SelectionError:
        return SelectionError(f"release file {path}: key {key}: expected {expected}, found {found!r}; fix the file "
                              f"(see docs/releases.md)")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise SelectionError(f"release file {path}: cannot be read ({exc}); fix the file") from None
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError, too many digits, too deep
        raise SelectionError(f"release file {path}: not valid TOML ({exc}); fix the file") from None
    if not RELEASE_NAME.fullmatch(path.stem):
        raise bad("(file name)", "a release name like 2.6, 3.0.0b1 or 3.0.0-nopackage", path.stem)
    extra = sorted(set(data) - {"release", "profile"})
    if extra:
        raise bad(", ".join(extra), "only the tables [release] and [profile]", extra)
    release, overrides = data.get("release"), data.get("profile", {})
    if not isinstance(release, dict):
        raise bad("release", "a table with versions and served", release)
    if not isinstance(overrides, dict):
        raise bad("profile", "a table of the profile's keys", overrides)
    unknown = sorted(set(release) - {"versions", "served", "remove", "absent", "extends"})
    if unknown:
        raise bad("release." + unknown[0], "one of versions, served, remove, absent, extends", release[unknown[0]])
    extends = release.get("extends")
    if extends is not None and not (isinstance(extends, str) and RELEASE_NAME.fullmatch(extends)
                                    and extends != path.stem):
        raise bad("release.extends", "the name of another release line of the profile (e.g. \"2.5\")", extends)
    versions = release.get("versions")
    if not (isinstance(versions, dict) and set(versions) == {"from", "below"}
            and all(isinstance(v, str) and parse_version(v) for v in versions.values())
            and parse_version(versions["from"]) < parse_version(versions["below"])):
        raise bad("release.versions", '{ from = "2.6", below = "2.7" } (versions, from < below)', versions)
    served = release.get("served")
    if not (isinstance(served, str) and served.strip() and "\n" not in served):
        raise bad("release.served", "a one-line string", served)
    remove = release.get("remove", [])
    if not (isinstance(remove, list) and all(isinstance(k, str) and REMOVE_KEY.fullmatch(k) for k in remove)):
        raise bad("release.remove", 'a list of dotted keys like "features.disable.softcap" or '
                  '"switches.macro[SOFTCAP_SWITCH]"', remove)
    absent = release.get("absent", [])
    if not (isinstance(absent, list) and all(isinstance(a, str) and a.strip() and not a.startswith("/")
                                             and ".." not in Path(a).parts for a in absent)):
        raise bad("release.absent", "a list of paths relative to the tree", absent)
    return Release(profile, path.stem, path, versions["from"], versions["below"], served, tuple(remove),
                   tuple(absent), overrides, extends)


def releases(profiles_dir: Path, profile: str) -> tuple[Release, ...]:
    """The release lines of `profile`, oldest first; () when it has none (our own kernels)."""
    folder = releases_dir(profiles_dir, profile)
    found = [read_release(p, profile) for p in sorted(folder.glob("*.toml"))] if folder.is_dir() else []
    named = {r.name: r for r in found}
    for i, r in enumerate(found):
        if r.extends is None:
            continue
        parent = named.get(r.extends)
        if parent is None or parent.extends is not None:
            raise SelectionError(f"release file {r.path}: key release.extends: {r.extends!r} is "
                                 + ("no release line of " + profile if parent is None else "itself an extension")
                                 + f" (lines that extend none: {', '.join(n for n, x in named.items() if not x.extends)})"
                                 + "; fix the file (see docs/releases.md)")
        found[i] = dataclasses.replace(r, parent=parent)
    # of two lines sharing versions the plain one last: the one `nearest` names for a newer version
    found.sort(key=lambda r: (parse_version(r.lowest), not r.absent))
    for a, b in zip(found, found[1:]):
        # Lines may share versions when one names files (`absent`) that tell its layout from the other's.
        if parse_version(b.lowest) < parse_version(a.below) and not (a.absent or b.absent):
            raise SelectionError(f"release files {a.path} and {b.path}: their versions overlap ({a.range_text} and "
                                 f"{b.range_text}) and no release.absent tells their layouts apart; a tree must "
                                 f"have one release: fix release.versions")
    return tuple(found)


def nearest(found: tuple[Release, ...], version: str | None) -> Release | None:
    """The served release closest to `version`: the one serving it, else the newest below it, else the
    oldest (a version older than every release), else the newest (no readable version)."""
    if not found:
        return None
    key = parse_version(version) if version else None
    if key is None:
        return found[-1]
    below = [r for r in found if parse_version(r.lowest) <= key]
    return below[-1] if below else found[0]


def instead(found: tuple[Release, ...], release: Release, version: str | None, root: Path) -> str:
    """What to pass for a tree of `version` that `release` does not serve: the nearest served release."""
    near = nearest(found, version)
    if near is None or near == release:
        return f"see flashbuild profiles --source {root}"
    return (f"the tree says release {version or 'nothing'}; the nearest served release is {near.id} ({near.served}): "
            f"pass --profile {near.id}, or leave --profile out to have the tree named "
            f"(flashbuild profiles --source {root})")


def entry_key(path: str, item: Any) -> str | None:
    """The key of an entry of keyed list `path` (KEYED): "SOFTCAP_SWITCH", "BOOL_SWITCH:Is_causal"; for
    a list of strings the string itself; None when the entry has none."""
    if isinstance(item, str):
        return item
    if not isinstance(item, dict) or path not in KEYED:
        return None
    parts = [item.get(name) for name in KEYED[path]]
    if not isinstance(parts[0], str):
        return None
    return ":".join(p for p in parts if isinstance(p, str))


def apply(base: dict, release: Release) -> dict:
    """The profile's TOML data with the release's keys removed, then its [profile] keys applied: a table
    merges into the table it names, a keyed list (KEYED) merges entry by entry, any other value
    replaces the profile's. A release that extends another (release.extends) applies over that one."""
    if release.parent is not None:
        base = apply(base, release.parent)
    data = copy.deepcopy(base)
    for dotted in release.remove:
        def missing(what: str) -> SelectionError:
            return SelectionError(f"release file {release.path}: release.remove names {dotted}, which the profile "
                                  f"{release.profile} does not have ({what}); remove it from the list")
        text, _, selector = dotted.partition("[")
        table, *path = data, *text.split(".")
        for part in path[:-1]:
            table = table.get(part) if isinstance(table, dict) else None
        if not isinstance(table, dict) or path[-1] not in table:
            raise missing(f"no key {text}")
        if not selector:
            del table[path[-1]]
            continue
        name, entries = selector[:-1], table[path[-1]]
        if not isinstance(entries, list):
            raise missing(f"{text} is no list")
        keys = [entry_key(text, item) for item in entries]
        if name not in keys:
            shown = ", ".join(k for k in keys if k) or "none"
            raise missing(f"no entry {name} in {text}; its entries: {shown}")
        del entries[keys.index(name)]

    def merge(into: dict, changes: dict, prefix: str) -> None:
        for key, value in changes.items():
            path = prefix + key
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value, path + ".")
            elif path in KEYED and isinstance(value, list) and isinstance(into.get(key), list):
                merged = into[key]
                for item in value:
                    found = entry_key(path, item)
                    keys = [entry_key(path, old) for old in merged]
                    if found is not None and found in keys:
                        merged[keys.index(found)] = copy.deepcopy(item)
                    else:
                        merged.append(copy.deepcopy(item))
            else:
                into[key] = copy.deepcopy(value)
    merge(data, release.overrides, "")
    return data


def split_name(text: str) -> tuple[str, str | None]:
    """'flash-attn-2@2.6' -> ('flash-attn-2', '2.6'); 'flash-attn-2' -> ('flash-attn-2', None)."""
    name, sep, release = text.partition(SEPARATOR)
    return name, (release if sep else None)
