"""The build cache: a private directory of build dirs, one per key, that `load()` imports code from.

So it must be the user's alone. Directories are created 0700 and files 0600 (compilers run under
umask 077); a cache root that another user owns or can write, a build entry that is a symbolic
link, another user's, or writable by others, is refused with the fix, before anything is built in
it or imported from it. Listing and cleaning never follow a link and never leave the cache: odd
entries are reported one line each and skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import filelock

from .. import env, safe_io
from . import graph
from ..errors import BuildError, SelectionError
from ..sources import release

PRIVATE_DIR = 0o700
UMASK = 0o077  # what compilers and our own writes run under: files 0600, dirs 0700
LOCK_FILE = ".lock"
MANIFEST = "manifest.json"
# Written into every cache entry flashbuild makes: `list` and `clean` touch only dirs that hold it (or,
# for entries made before it, a manifest naming the entry's own key), never another program's dir.
MARKER = ".flashbuild-build"
MARKER_TEXT = "a flashbuild build dir: `flashbuild list` shows it, `flashbuild clean KEY` removes it\n"
MANIFEST_LIMIT = 4 * 2**20


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def forbidden_characters(value: str) -> str | None:
    """The name of a character no build path or flag may hold (it would end a ninja line or a C
    string), or None."""
    for char, name in (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL byte")):
        if char in value:
            return name
    return None


def build_path_problem(path: str) -> str | None:
    """Why a build dir at `path` cannot be written into build.ninja and passed to nvcc (graph.py: ninja
    has no escape for `|` in a path; nvcc's own shell acts on `$`, backticks, `"` and `\\`), or None."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8: build.ninja (UTF-8 text) cannot hold it
        return "it holds bytes that are not UTF-8 text, which build.ninja cannot hold"
    if "|" in path:
        return "it holds `|`, which ninja cannot escape in a build path"
    if "#" in path:  # nvcc writes it unescaped into its depfiles, where ninja splits a path at it
        return ("it holds `#`, which nvcc's depfiles do not escape: ninja would misread every dependency "
                "and recompile everything on each build")
    return graph.nvcc_arg_problem(path)


# ---------------------------------------------------------------- where the cache is, and whether to trust it

def _root_source() -> str:
    return "FLASHBUILD_CACHE_DIR" if os.environ.get("FLASHBUILD_CACHE_DIR") else "the default cache dir"


def _fix_root(root: Path) -> str:
    if os.environ.get("FLASHBUILD_CACHE_DIR"):
        return "set FLASHBUILD_CACHE_DIR to a directory of your own (e.g. export FLASHBUILD_CACHE_DIR=$HOME/.cache/flashbuild)"
    return f"fix {root} or set FLASHBUILD_CACHE_DIR to a directory of your own"


def ownership_problem(path: Path, info: os.stat_result | None = None) -> str | None:
    """Why `path` (already lstat'ed into `info` when given) cannot hold code we import, or None:
    it must be ours and not writable by group or others."""
    info = info or path.lstat()
    if info.st_uid != os.geteuid():
        return f"it belongs to uid {info.st_uid}, not to you (uid {os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by {'others' if info.st_mode & stat.S_IWOTH else 'its group'} (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def cache_root(create: bool = True) -> Path:
    """The cache root, created 0700 when missing, checked: a directory, ours, not writable by
    others, writable by us. Raises SelectionError naming the variable and the fix."""
    raw = os.environ.get("FLASHBUILD_CACHE_DIR")
    if raw is not None:
        bad = forbidden_characters(raw)
        if bad is None and raw.strip() and raw != raw.strip():  # ' /x' would be a dir named ' ' under the cwd
            bad = "leading or trailing spaces"
        head = raw.split("/")[0]
        if bad is None and head.startswith("~") and os.path.expanduser(head) == head:
            bad = f"{head}, no user's home directory"
        if bad is None and raw.strip():
            bad = "bytes that are not UTF-8" if build_path_problem(raw) and "UTF-8" in build_path_problem(raw) \
                else None
        if bad or not raw.strip():
            what = f"holds {bad}" if bad else "is empty"
            raise SelectionError(f"FLASHBUILD_CACHE_DIR={raw!r} {what}; set it to a plain directory path "
                                 f"(or unset it for {env.default_cache_dir()})")
    root = env.cache_dir()
    source = _root_source()
    if not root.exists():
        if not create:
            return root
        try:
            with private_umask():
                root.mkdir(parents=True, mode=PRIVATE_DIR, exist_ok=True)  # another process may win the race
        except OSError as exc:
            raise SelectionError(f"{source} {root}: cannot create it ({exc.strerror or exc}); {_fix_root(root)}") from None
    if not root.is_dir():
        raise SelectionError(f"{source} {root}: not a directory; {_fix_root(root)}")
    problem = ownership_problem(root, root.stat())
    if problem:
        raise SelectionError(f"{source} {root}: refusing a cache that others could write into: {problem}; "
                             f"`chmod 700 {shlex.quote(str(root))}` if it is yours, else {_fix_root(root)}")
    if not os.access(root, os.W_OK | os.X_OK):
        raise SelectionError(f"{source} {root}: not writable by you; {_fix_root(root)}")
    return root


def default_build_dir(key: str) -> Path:
    return env.cache_dir() / key


@contextlib.contextmanager
def private_umask():
    """Files and dirs created in this block are the user's alone (0600 / 0700)."""
    old = os.umask(UMASK)
    try:
        yield
    finally:
        os.umask(old)


def prepare_build_dir(build_dir: Path, *, in_cache: bool, flag: str = "--build-dir") -> Path:
    """Create the build dir (0700) or check the existing one: a real directory (in the cache: not
    a symbolic link), ours, not writable by others. Raises naming the flag or the cache entry."""
    where = f"cache entry {build_dir}" if in_cache else f"{flag} {build_dir}"
    problem = build_path_problem(str(build_dir))
    if problem:
        fix = ("set FLASHBUILD_CACHE_DIR to a path without it" if in_cache else f"choose a {flag} without it")
        raise SelectionError(f"{_root_source() if in_cache else flag} {shlex.quote(str(build_dir))}: {problem}; {fix}")
    if in_cache:
        cache_root()
    try:
        info = build_dir.lstat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise SelectionError(f"{where}: cannot be used ({exc.strerror or exc}); choose another directory") from None
    if info is None:
        try:
            with private_umask():
                build_dir.mkdir(parents=True, mode=PRIVATE_DIR, exist_ok=True)
        except OSError as exc:
            raise SelectionError(f"{where}: cannot create it ({exc.strerror or exc}); "
                                 f"{'fix the cache dir' if in_cache else f'choose a writable place for {flag}'}") from None
        info = build_dir.lstat()  # ours, or another process's that won the race: checked below either way
    if stat.S_ISLNK(info.st_mode) and in_cache:
        raise SelectionError(f"{where} is a symbolic link: flashbuild never builds or imports through one; "
                             f"remove it (`rm {shlex.quote(str(build_dir))}`) and rerun")
    if stat.S_ISLNK(info.st_mode):
        try:
            info = build_dir.stat()
        except OSError as exc:  # a loop (ELOOP) or a dangling link
            raise SelectionError(f"{where}: a symbolic link that leads nowhere ({exc.strerror or exc}); remove it or "
                                 f"choose another {flag}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise SelectionError(f"{where}: not a directory; remove it or choose another {flag if not in_cache else 'cache dir'}")
    problem = ownership_problem(build_dir, info)
    if problem:
        fix = f"`flashbuild clean {shlex.quote(build_dir.name)}` or remove it" if in_cache else f"choose a directory of your own for {flag}"
        raise SelectionError(f"{where}: refusing a build dir that others could write into: {problem}; {fix}")
    if not os.access(build_dir, os.W_OK | os.X_OK):
        raise SelectionError(f"{where}: not writable by you (read-only?); "
                             f"{'fix the cache dir' if in_cache else f'choose a writable place for {flag}'}")
    check_contents(build_dir, where, fix=f"`flashbuild clean {shlex.quote(build_dir.name)}`" if in_cache
                   else f"`rm -r {shlex.quote(str(build_dir))}`")
    if in_cache and not (build_dir / MARKER).is_file():
        with private_umask():
            (build_dir / MARKER).write_text(MARKER_TEXT)
    return build_dir


def check_contents(build_dir: Path, where: str, fix: str) -> None:
    """Every entry flashbuild or ninja writes into is inside the build dir: no symbolic link, FIFO or
    device directly in it or in its subdirs (generated/, obj/, ...), where a write would follow it out."""
    def odd(path: Path, info: os.stat_result) -> str | None:
        if stat.S_ISLNK(info.st_mode):
            return "a symbolic link"
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            return "not a regular file or dir"
        return None

    def entries(directory: Path) -> list[tuple[Path, os.stat_result]]:
        # Another process building this key at the same moment (pytest workers, ranks) renames its
        # temporaries and removes them between our listing and our stat: an entry that is gone by then
        # is skipped, not an unreadable build dir.
        listed = []
        for e in os.scandir(directory):
            try:
                listed.append((Path(e.path), e.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue
        return listed

    try:
        found = entries(build_dir)
        for entry, info in list(found):
            if stat.S_ISDIR(info.st_mode):
                try:
                    found += entries(entry)
                except FileNotFoundError:
                    continue
    except OSError as exc:
        raise SelectionError(f"{where}: cannot be read ({exc.strerror or exc}); remove it with {fix}") from None
    for path, info in found:
        problem = odd(path, info)
        if problem:
            raise SelectionError(f"{where}: {path} is {problem}; flashbuild writes only into files and dirs of "
                                 f"its own inside a build dir: remove it with {fix} and rerun")


def check_loadable(extension: Path) -> None:
    """Before importing `extension`: it and its build dir are real files/dirs of ours that nobody
    else can write. Raises BuildError otherwise (nothing is imported)."""
    for path, what in ((extension.parent, "build dir"), (extension, "extension")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            raise BuildError(f"refusing to import {extension}: its {what} {path} is a symbolic link; "
                             f"remove it and rebuild")
        problem = ownership_problem(path, info)
        if problem:
            raise BuildError(f"refusing to import {extension}: its {what} {path}: {problem}; remove the build dir "
                             f"(`flashbuild clean {shlex.quote(extension.parent.name)}` or rm -r) and rebuild")


@contextlib.contextmanager
def build_lock(build_dir: Path):
    """The build dir's file lock: one process builds a key, the others wait here, then load."""
    lock = filelock.FileLock(str(build_dir / LOCK_FILE), mode=0o600)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        log(f"waiting for another flashbuild process building {build_dir.name} (lock: {lock.lock_file})")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


# ---------------------------------------------------------------- list and clean

@dataclass(frozen=True)
class CachedBuild:
    key: str
    path: Path
    variants: int
    size_bytes: int
    has_extension: bool
    problems: tuple[str, ...] = field(default=())  # a malformed manifest, say: listed, still removable


def _read_manifest(path: Path) -> tuple[dict, list[str]]:
    """The manifest's usable fields and what was wrong with it."""
    manifest = path / MANIFEST
    try:
        if manifest.is_symlink():
            return {}, ["manifest.json is a symbolic link, not read"]
        data = safe_io.read_json(manifest, MANIFEST_LIMIT)
    except FileNotFoundError:
        return {}, ["no manifest.json (an unfinished build)"]
    except safe_io.UnreadableFile as exc:
        return {}, [f"manifest.json unreadable ({exc.strerror})"]
    except (OSError, ValueError) as exc:
        return {}, [f"manifest.json unreadable ({exc.__class__.__name__})"]
    if not isinstance(data, dict):
        return {}, [f"manifest.json is a {type(data).__name__}, not an object"]
    problems = []
    variants = data.get("variants", [])
    if not isinstance(variants, list) or not all(isinstance(v, str) for v in variants):
        problems.append("manifest.json: variants is not a list of names")
        data["variants"] = []
    extension = data.get("extension")
    if extension is not None and (not isinstance(extension, str) or "/" in extension or extension in ("", ".", "..")):
        problems.append("manifest.json: extension is not a file name")
        data["extension"] = None
    return data, problems


def _size(path: Path) -> int:
    """Bytes of the regular files under path, each file once (the loader hard-links a rebuilt
    extension beside itself: loader.snapshot)."""
    total, seen = 0, set()
    for dirpath, _dirnames, filenames in os.walk(path):  # os.walk never follows links by default
        for name in filenames:
            try:
                info = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_size
    return total


def scan(root: Path | None = None) -> tuple[list[CachedBuild], list[str]]:
    """(the build dirs in the cache, one line per odd entry skipped). Never follows a link."""
    root = root or env.cache_dir()
    builds, skipped = [], []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except FileNotFoundError:
        return [], []
    except NotADirectoryError:
        return [], [f"{root}: not a directory (FLASHBUILD_CACHE_DIR?)"]
    except OSError as exc:
        return [], [f"{root}: cannot be read ({exc.strerror or exc})"]
    for entry in entries:
        path = Path(entry.path)
        if entry.name == release.SOURCES and entry.is_dir(follow_symlinks=False):
            continue  # the upstream releases --source NAME==VERSION fetched (sources/release.py), not a build
        if entry.is_symlink():
            skipped.append(f"{path}: a symbolic link, skipped (flashbuild never follows links out of the cache)")
            continue
        if not entry.is_dir(follow_symlinks=False):
            skipped.append(f"{path}: not a build dir (a file), skipped")
            continue
        if not is_flashbuild_dir(path):
            skipped.append(f"{path}: not a flashbuild build dir (no {MARKER}, nor a manifest.json of its key), "
                           f"skipped: remove it yourself if it is not needed")
            continue
        manifest, problems = _read_manifest(path)
        extension = manifest.get("extension")
        has_extension = bool(extension) and (path / extension).is_file() and not (path / extension).is_symlink()
        builds.append(CachedBuild(path.name, path, len(manifest.get("variants", [])), _size(path), has_extension,
                                  tuple(problems)))
    return builds, skipped


def is_flashbuild_dir(path: Path) -> bool:
    """Whether flashbuild made this cache entry: it holds the marker (a regular file), or, made before
    the marker, a manifest.json that names the entry's own key."""
    try:
        if stat.S_ISREG((path / MARKER).lstat().st_mode):
            return True
    except OSError:
        pass
    try:
        if (path / MANIFEST).is_symlink():
            return False
        data = safe_io.read_json(path / MANIFEST, MANIFEST_LIMIT)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("key") == path.name


def cached_builds(root: Path | None = None) -> list[CachedBuild]:
    return scan(root)[0]


def remove_build(build: CachedBuild, root: Path | None = None) -> None:
    """Delete a cached build dir under its lock (waits for a build of it to finish). Refuses a
    path that is a link or not directly inside the cache root."""
    root = (root or env.cache_dir())
    path = build.path
    if path.is_symlink() or path.parent.resolve() != root.resolve():
        raise BuildError(f"refusing to remove {path}: not a build dir directly inside the cache {root}")
    lock = path / LOCK_FILE
    try:
        odd_lock = lock.is_symlink() or (lock.exists() and not lock.is_file())
    except OSError:
        odd_lock = True
    if odd_lock:  # a link or a dir where the lock belongs: no build can hold it; never open it
        _discard(path, root)
        return
    try:
        with build_lock(path):
            _discard(path, root)
    except FileNotFoundError:  # another `clean` removed it first
        return
    except FileExistsError:
        # filelock makes the lock's directory (mkdir, exist_ok): a concurrent `clean` renaming the entry away between
        # that mkdir and its is_dir check makes it fail as if a file stood there
        if not os.path.lexists(path):
            return
        raise BuildError(f"refusing to remove {path}: it is not a build dir (a file stands where the dir was); "
                         f"remove it by hand: rm {shlex.quote(str(path))}") from None


def _discard(path: Path, root: Path) -> None:
    """Rename the entry away (atomic: a concurrent `clean` or `list` sees it whole or not at all),
    then delete it; an entry another process removed first is not an error."""
    import tempfile

    trash = Path(tempfile.mkdtemp(prefix=".removing-", dir=root))
    try:
        os.rename(path, trash / "entry")
    except FileNotFoundError:
        shutil.rmtree(trash, ignore_errors=True)
        return
    shutil.rmtree(trash, ignore_errors=True)
    if trash.exists():
        raise BuildError(f"could not remove all of {path} (moved to {trash}); remove it by hand: rm -r {trash}")
