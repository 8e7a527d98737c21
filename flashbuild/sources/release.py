"""Release specs: `--source flash-attn==2.8.3` names an upstream release instead of a tree on disk.

fetch() gets the release's sdist with pip (`pip download --no-binary :all:`: the user's own index,
proxy and certificates), refuses it unless its sha256 is the one configs/sources/sdists.toml records
for that version (pip checks it before it runs the sdist's setup.py for metadata, and we check the
file again), unpacks it into <cache>/sources/ (regular files and directories only, every one inside
the archive's single top-level directory) and returns the tree's root: a build reads it like any
--source path. A release already unpacked from the recorded digest is used as it is, offline.

`python3 -m flashbuild.sources.release flash-attn==2.8.3` fetches the release and prints its root
(for commands that need the tree's own files, such as its tests).
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from .. import env
from ..errors import SelectionError
from ..safe_io import sha256_of

TABLE = "sources/sdists.toml"  # under configs/: package -> version -> sha256 (not a preset: beside them)
SOURCES = "sources"        # in the cache root: the unpacked releases
PIP_TIMEOUT_S = 900        # an 8 MB sdist plus its setup.py's metadata; a stalled index ends here
# NAME==VERSION, PEP 508 name and a PEP 440-ish version: nothing that could reach a shell or a path oddly.
SPEC = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([0-9][0-9A-Za-z.+!_-]*)")
SHA256 = re.compile(r"[0-9a-f]{64}")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


class FetchError(SelectionError):
    """The release could not be had (no network, the index refused): not a wrong spec or table."""

    exit_code = 1


class DigestError(SelectionError):
    """The sdist is not the file the table records (or not a well-formed sdist): refused, not unpacked."""

    exit_code = 1


@dataclass(frozen=True)
class Release:
    package: str            # normalized: flash-attn
    version: str            # as the table spells it: 2.8.3
    sha256: str             # of the sdist the package index serves
    pip_env: tuple[tuple[str, str], ...] = ()  # set while pip runs the sdist's setup.py for metadata

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def dir_name(self) -> str:
        """flash_attn-2.8.3: the sdist's own top-level directory name (and its archive's stem)."""
        return f"{re.sub(r'[-_.]+', '_', self.package)}-{self.version}"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_spec(text: str) -> bool:
    """Whether --source TEXT is meant as a release spec rather than a path: a version operator (==, >=,
    ~=, <, ...), no directory separator, and no directory of that name here (./a==b reads as a path).
    resolve() then takes NAME==VERSION and refuses the other operators."""
    return (bool(re.search(r"[=<>~!]=|[<>]", text)) and "/" not in text and os.sep not in text
            and not Path(text).is_dir())


def table_path() -> Path:
    return env.configs_dir() / TABLE


def _sort_key(version: str) -> tuple:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.+!_-]", version))


def read_table(path: Path | None = None) -> dict[str, Release]:
    """{spec: Release} from the table: [package] env = {...} and [package.sha256] "version" = "hex".
    A malformed table is an error naming the file and the key."""
    path = path or table_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SelectionError(f"{path}: no table of release digests here, so no NAME==VERSION --source can be "
                             f"checked; pass --source PATH of an unpacked tree, or restore {TABLE} in the "
                             f"configs/ of your flashbuild checkout (FLASHBUILD_ROOT?)") from None
    except (OSError, ValueError, RecursionError) as exc:  # TOMLDecodeError, bad UTF-8, too many digits, too deep
        raise SelectionError(f"{path}: cannot be read as TOML ({exc}); fix the file") from None

    def bad(key: str, expected: str, found) -> SelectionError:
        return SelectionError(f"{path}: key {key}: expected {expected}, found {found!r}; fix the table")

    releases = {}
    for package, entry in data.items():
        if not isinstance(entry, dict) or not SPEC.fullmatch(f"{package}==0"):
            raise bad(package, "a table named by a package ([flash-attn])", entry)
        unknown = sorted(set(entry) - {"env", "sha256"})
        if unknown:
            raise bad(f"{package}.{unknown[0]}", "only the keys env and sha256", entry[unknown[0]])
        pip_env = entry.get("env", {})
        if not isinstance(pip_env, dict) or not all(ENV_NAME.fullmatch(k) and isinstance(v, str) and
                                                    re.fullmatch(r"[A-Za-z0-9_.,=:-]*", v) for k, v in pip_env.items()):
            raise bad(f"{package}.env", "a table of VARIABLE = \"plain value\"", pip_env)
        digests = entry.get("sha256")
        if not isinstance(digests, dict) or not digests:
            raise bad(f"{package}.sha256", 'a table of "version" = "sha256 hex digest"', digests)
        for version, digest in digests.items():
            if not SPEC.fullmatch(f"{package}=={version}"):
                raise bad(f'{package}.sha256."{version}"', "a version such as 2.8.3", version)
            if not isinstance(digest, str) or not SHA256.fullmatch(digest):
                raise bad(f'{package}.sha256."{version}"', "64 lowercase hex digits (sha256sum's output)", digest)
            release = Release(normalize(package), version, digest, tuple(sorted(pip_env.items())))
            releases[release.spec] = release
    return releases


def resolve(spec: str, table: Path | None = None) -> Release:
    """The table's Release for NAME==VERSION; an unknown package or version is an error naming
    what the table holds, the nearest release, and how to add one."""
    match = SPEC.fullmatch(spec.strip())
    if not match:
        raise SelectionError(f"--source {spec!r}: not a release spec; pin one release as NAME==VERSION "
                             f"(e.g. --source flash-attn==2.8.3), or pass the path of a tree (./{spec} for a "
                             f"directory of that name)")
    path = table or table_path()
    releases = read_table(path)
    package, version = normalize(match.group(1)), match.group(2)
    known = sorted({r.package for r in releases.values()})
    if package not in known:
        raise SelectionError(f"--source {spec}: {path} records no releases of {package} (it has: {', '.join(known)}); "
                             f"pass --source PATH of an unpacked {match.group(1)} tree instead")
    found = releases.get(f"{package}=={version}")
    if found is None:
        versions = sorted((r.version for r in releases.values() if r.package == package), key=_sort_key)
        near = [_nearest_recorded(version, versions)]
        pip_env = "".join(f"{k}={v} " for k, v in releases[f"{package}=={near[0]}"].pip_env)
        raise SelectionError(
            f"--source {spec}: {package} {version} is not in {path}, so its sdist cannot be checked (releases "
            f"recorded: {', '.join(versions)}); use --source {package}=={near[0]}, or add the release: "
            f"`{pip_env}pip download --no-deps --no-binary :all: --no-build-isolation {package}=={version} -d DIR`, then "
            f"its `sha256sum DIR/{Release(package, version, '').dir_name}.tar.gz` as "
            f"\"{version}\" = \"<digest>\" under [{package}.sha256]")
    return found


def _nearest_recorded(version: str, versions: list[str]) -> str:
    """The recorded version closest to `version` in release order: the newest of the same release numbers (2.5.9:
    2.5.9.post1), else the newest below it, else the oldest (older than every one); a version that does not parse,
    the one most like it as text."""
    from .releases import parse_version

    key = parse_version(version)
    keyed = [(parse_version(v), v) for v in versions]
    if key is None or any(k is None for k, _ in keyed):
        return (difflib.get_close_matches(version, versions, n=1, cutoff=0) or versions[-1:])[0]
    same = [v for k, v in sorted(keyed) if k[:4] == key[:4]]
    if same:
        return same[-1]
    below = [v for k, v in sorted(keyed) if k <= key]
    return below[-1] if below else min(keyed)[1]


def sources_dir() -> Path:
    """<cache>/sources, created 0700 and checked: a real directory of ours that nobody else can write
    (the trees in it are compiled into extensions that get imported)."""
    root = env.cache_dir() / SOURCES
    where = f"{root} (FLASHBUILD_CACHE_DIR sets the cache)"
    if any(c in str(root) for c in "\n\r\0"):  # the build refuses such a cache too: refuse it before writing
        raise SelectionError(f"{str(root)!r}: the cache path holds a newline or NUL; set FLASHBUILD_CACHE_DIR "
                             f"to a plain directory path")
    try:
        with _private_umask():
            root.mkdir(parents=True, mode=0o700, exist_ok=True)
        info = root.lstat()
    except OSError as exc:
        raise SelectionError(f"{where}: cannot create it ({exc.strerror or exc}); set FLASHBUILD_CACHE_DIR to a "
                             f"directory of your own") from None
    _check_private(root, info, where)
    return root


def _check_private(path: Path, info: os.stat_result, where: str) -> None:
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise SelectionError(f"{where}: {'a symbolic link' if stat.S_ISLNK(info.st_mode) else 'not a directory'}; "
                             f"remove it (`rm {path}`) and rerun")
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SelectionError(f"{where}: refusing a directory that others could write into (owner uid {info.st_uid}, "
                             f"mode {stat.S_IMODE(info.st_mode):o}); `chmod 700 {path}` if it is yours, else set "
                             f"FLASHBUILD_CACHE_DIR to a directory of your own")


@contextlib.contextmanager
def _private_umask():
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def fetch(spec: str, into: Path | None = None, table: Path | None = None) -> Path:
    """The root of release `spec`'s unpacked sdist under `into` (default <cache>/sources), fetched and
    checked when it is not there yet. One process fetches a release; the others wait for it."""
    import filelock

    release = resolve(spec, table)
    root = into if into is not None else sources_dir()
    if into is not None:
        with _private_umask():
            root.mkdir(parents=True, exist_ok=True)
    tree, marker = root / release.dir_name, root / f"{release.dir_name}.sha256"
    with filelock.FileLock(str(root / f"{release.dir_name}.lock"), mode=0o600):
        if _unpacked(tree, marker, release):
            return tree
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=root) as scratch:
            archive = download(release, Path(scratch) / "download", table or table_path())
            found = sha256_of(archive)
            if found != release.sha256:
                raise DigestError(
                    f"--source {release.spec}: the downloaded {archive.name} has sha256 {found}, but "
                    f"{table or table_path()} records {release.sha256} for it: refusing to unpack it (deleted). "
                    f"If the package index serves another file under this version, check its digest there and fix "
                    f"the table; else pass --source PATH of a tree you trust")
            staged = unpack(archive, Path(scratch) / "unpack", release)
            marker.unlink(missing_ok=True)  # no marker while the tree is replaced: a crash here refetches
            if tree.is_symlink() or tree.is_file():
                tree.unlink()
            elif tree.exists():
                shutil.rmtree(tree)
            staged.rename(tree)
            _write_marker(marker, release.sha256)
    return tree


def _unpacked(tree: Path, marker: Path, release: Release) -> bool:
    """Whether `tree` is this release, unpacked in full from the recorded digest."""
    try:
        said = marker.read_text().strip()
    except OSError:
        return False
    return said == release.sha256 and tree.is_dir() and not tree.is_symlink()


def _write_marker(marker: Path, digest: str) -> None:
    partial = marker.with_name(marker.name + ".partial")
    with _private_umask():
        partial.write_text(digest + "\n")
    partial.replace(marker)


def pip_command(release: Release, requirements: Path, dest: Path) -> list[str]:
    # --no-build-isolation: the sdist's setup.py imports torch for its metadata, and an isolated build
    # env would download torch again; --no-deps: only this archive, not the release's dependencies.
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
            "--disable-pip-version-check", "-q", "-r", str(requirements), "-d", str(dest)]


def download(release: Release, dest: Path, table: Path) -> Path:
    """pip downloads the release's sdist into `dest` (a new dir), checking the table's digest itself
    (--hash in the requirement: a different file never reaches setup.py); returns the archive."""
    with _private_umask():
        dest.mkdir(parents=True)
    requirements = dest.parent / "requirement.txt"
    requirements.write_text(f"{release.spec} --hash=sha256:{release.sha256}\n")
    command = pip_command(release, requirements, dest)
    shown = f"pip download --no-deps --no-binary :all: --no-build-isolation {release.spec}"
    try:
        process = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=PIP_TIMEOUT_S,
                                 env={**os.environ, **dict(release.pip_env)}, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise FetchError(f"--source {release.spec}: `{shown}` did not finish in {PIP_TIMEOUT_S} s; check the network "
                         f"and the package index (pip config list), or pass --source PATH of an unpacked tree") from None
    output = f"{process.stdout}\n{process.stderr}"
    if "DO NOT MATCH THE HASHES" in output:
        got = re.search(r"Got\s+([0-9a-f]{64})", output)
        raise DigestError(
            f"--source {release.spec}: the package index served a file whose sha256 is "
            f"{got.group(1) if got else 'not'} the {release.sha256} that {table} records; pip refused it. "
            f"Check the release's digest on the index and fix the table, or pass --source PATH of a tree you trust")
    archives = [p for p in dest.iterdir() if p.is_file() and not p.is_symlink()]
    if process.returncode != 0 or len(archives) != 1:
        lines = [line.strip() for line in output.splitlines() if line.strip() and not line.startswith("WARNING:")]
        said = lines[-1][:300] if lines else f"exit {process.returncode}, no output"
        raise FetchError(f"--source {release.spec}: `{shown}` failed ({said}); check the network and the package "
                         f"index (pip config list) and that torch is installed (the sdist's setup.py imports it), "
                         f"or pass --source PATH of an unpacked tree")
    return archives[0]


def unpack(archive: Path, dest: Path, release: Release) -> Path:
    """Extract the sdist into `dest` and return its one top-level directory. Every member is checked
    first: a regular file or a directory, named inside <name>-<version>/ (no absolute path, no ..);
    anything else refuses the whole archive."""
    top = release.dir_name
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for member in members:
                parts = Path(member.name).parts
                if (not parts or parts[0] != top or ".." in parts or os.path.isabs(member.name)
                        or "\0" in member.name or "\\" in member.name):
                    raise DigestError(f"--source {release.spec}: {archive.name} holds {member.name!r}, outside "
                                         f"its {top}/ directory: refusing to unpack it")
                if not (member.isfile() or member.isdir()):
                    raise DigestError(f"--source {release.spec}: {archive.name} holds {member.name!r}, which is "
                                         f"not a regular file or directory (a link or device): refusing to unpack it")
            with _private_umask():
                dest.mkdir(parents=True)
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(dest, members=members, filter="data")
                else:  # Python < 3.10.12: the checks above are the filter
                    tar.extractall(dest, members=members)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DigestError(f"--source {release.spec}: {archive.name} cannot be unpacked ({exc}); "
                             f"run again to download it afresh") from None
    if not (dest / top).is_dir():
        raise DigestError(f"--source {release.spec}: {archive.name} has no {top}/ directory; it is not this "
                             f"release's sdist")
    return dest / top


def main(argv: list[str] | None = None) -> int:
    """`python3 -m flashbuild.sources.release NAME==VERSION`: fetch, check, unpack; print the root."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python3 -m flashbuild.sources.release NAME==VERSION  (e.g. flash-attn==2.8.3): fetches the "
              "release's sdist into the cache, checks its sha256, unpacks it and prints the tree's root",
              file=sys.stderr if len(args) != 1 else sys.stdout)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        print(fetch(args[0]))
    except SelectionError as exc:
        print(f"flashbuild: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
