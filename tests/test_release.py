"""Release specs (flashbuild/sources/release.py): `--source flash-attn==2.8.3` resolves through
configs/sources/sdists.toml, fetches the sdist with pip, refuses a digest other than the table's, unpacks it
safely into the cache and builds from there. Offline here: pip is replaced by a stand-in serving a
tarball we make; the last test fetches a real release from the package index (skipped without one)."""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from flashbuild.errors import SelectionError
from flashbuild.sources import release
from helpers import REPO, run_cli

SPEC_ARGS = ["--profile", "flash-attn-2", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd",
             "--dry-run"]


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def sdist_bytes(top: str, files: dict[str, str]) -> bytes:
    """A gzipped tarball of `files` under `top`/, as an sdist is laid out."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def fa2_files(version: str) -> dict[str, str]:
    """flash-attn 2's layout, empty files, as tests/test_profiles.py's fake tree has it."""
    from test_profiles import FA2

    files = {rel: "" for rel in (*FA2.required, *FA2.api_sources, "csrc/cutlass/include/cutlass/cutlass.h")}
    files["flash_attn/__init__.py"] = f'__version__ = "{version}"\n'
    return files


@pytest.fixture
def served(tmp_path, monkeypatch, cache):
    """A stand-in index: table() writes a table holding the given archives' digests; pip's download
    is replaced by a copy of the archive served for the spec (or other bytes); calls are counted."""

    class Index:
        def __init__(self):
            self.archives: dict[str, bytes] = {}
            self.serve: dict[str, bytes] = {}  # what the "index" sends, when it is not the recorded archive
            self.calls: list[str] = []
            self.table_file = tmp_path / "sdists.toml"

        def add(self, version: str, data: bytes) -> str:
            self.archives[version] = data
            digest = hashlib.sha256(data).hexdigest()
            lines = "".join(f'"{v}" = "{hashlib.sha256(d).hexdigest()}"\n' for v, d in self.archives.items())
            self.table_file.write_text(f'[flash-attn]\nenv = {{ FLASH_ATTENTION_SKIP_CUDA_BUILD = "TRUE" }}\n'
                                       f'[flash-attn.sha256]\n{lines}')
            return digest

    index = Index()

    def download(rel, dest, table):
        index.calls.append(rel.spec)
        dest.mkdir(parents=True)
        archive = dest / f"{rel.dir_name}.tar.gz"
        archive.write_bytes(index.serve.get(rel.version, index.archives[rel.version]))
        return archive

    monkeypatch.setattr(release, "download", download)
    monkeypatch.setattr(release, "table_path", lambda: index.table_file)
    return index


# ---------------------------------------------------------------- the spec and the table

def test_the_committed_table_records_the_releases_people_pin():
    table = release.read_table(REPO / "configs" / release.TABLE)
    for version in ("2.5.9.post1", "2.6.3", "2.7.4.post1", "2.8.0.post2", "2.8.2", "2.8.3"):
        found = table[f"flash-attn=={version}"]
        assert len(found.sha256) == 64 and found.dir_name == f"flash_attn-{version}"
        assert dict(found.pip_env) == {"FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"}


@pytest.mark.parametrize("text, spec", [("flash-attn==2.8.3", True), ("flash_attn==2.6.3", True),
                                        ("flash-attn>=2.8", True), ("flash-attn~=2.8", True),
                                        ("./flash-attn==2.8.3", False), ("/src/flash-attn-2.8.3", False),
                                        ("flash-attn-2.8.3", False), ("~/src/a==b/c", False)])
def test_a_release_spec_is_told_from_a_path(text, spec):
    assert release.is_spec(text) is spec


def test_names_normalize_as_the_package_index_does():
    table = REPO / "configs" / release.TABLE
    assert release.resolve("Flash_Attn==2.8.3", table) == release.resolve("flash-attn==2.8.3", table)


@pytest.mark.parametrize("spec, words", [
    ("flash-attn==2.8.9", ["flash-attn 2.8.9 is not in", "releases recorded: 2.5.0, ", "2.8.3",
                           "use --source flash-attn==2.8.", "FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE pip download",
                           '"2.8.9" = "<digest>" under [flash-attn.sha256]']),
    ("xformers==0.0.28", ["records no releases of xformers (it has: flash-attn)", "pass --source PATH"]),
    ("flash-attn>=2.8", ["not a release spec; pin one release as NAME==VERSION", "--source flash-attn==2.8.3"]),
    ("flash-attn==2.8.3;rm", ["not a release spec"]),
])
def test_an_unknown_release_is_refused_naming_what_exists_and_the_fix(spec, words, cache):
    result = run_cli("build", "--source", spec, *SPEC_ARGS)
    assert result.exit_code == 2
    line = one_line(result)
    assert line.startswith(f"flashbuild: error: --source {spec}") or f"--source {spec!r}" in line
    for word in words:
        assert word in line, line
    assert not (cache / release.SOURCES).exists() or not any((cache / release.SOURCES).glob("flash_attn-*/"))


@pytest.mark.parametrize("text, key", [
    ('[flash-attn.sha256]\n"2.8.3" = "abc"\n', 'flash-attn.sha256."2.8.3"'),
    ('[flash-attn.sha256]\n"2.8.3" = 5\n', 'flash-attn.sha256."2.8.3"'),
    ('[flash-attn]\nsha256 = {}\n', "flash-attn.sha256"),
    ('[flash-attn]\nurl = "x"\n[flash-attn.sha256]\n"1" = "' + "0" * 64 + '"\n', "flash-attn.url"),
    ('[flash-attn]\nenv = { X = "$(id)" }\n[flash-attn.sha256]\n"1" = "' + "0" * 64 + '"\n', "flash-attn.env"),
    ('flash-attn = 3\n', "flash-attn"),
])
def test_a_malformed_table_names_the_file_and_the_key(tmp_path, text, key):
    table = tmp_path / "sdists.toml"
    table.write_text(text)
    with pytest.raises(SelectionError) as error:
        release.resolve("flash-attn==2.8.3", table)
    assert f"{table}: key {key}: expected " in str(error.value) and "fix the table" in str(error.value)


def test_a_table_that_is_not_toml_or_missing_is_one_clear_error(tmp_path):
    table = tmp_path / "sdists.toml"
    table.write_text("[flash-attn\n")
    with pytest.raises(SelectionError, match="cannot be read as TOML"):
        release.read_table(table)
    with pytest.raises(SelectionError, match="no table of release digests here"):
        release.read_table(tmp_path / "none.toml")


# ---------------------------------------------------------------- fetch: digest, unpack, cache

def test_a_release_spec_builds_from_the_fetched_tree_and_fetches_once(served, cache):
    served.add("2.8.3", sdist_bytes("flash_attn-2.8.3", fa2_files("2.8.3")))
    result = run_cli("build", "--source", "flash-attn==2.8.3", *SPEC_ARGS)
    assert result.exit_code == 0, result.output
    tree = cache / release.SOURCES / "flash_attn-2.8.3"
    assert f"flash-attn-2 at {tree}" in result.stdout or str(tree) in result.stdout
    assert "flash_fwd_hdim64_fp16_sm80" in result.stdout and served.calls == ["flash-attn==2.8.3"]
    assert (tree / "flash_attn" / "__init__.py").read_text() == '__version__ = "2.8.3"\n'
    assert run_cli("build", "--source", "flash-attn==2.8.3", *SPEC_ARGS).exit_code == 0
    assert served.calls == ["flash-attn==2.8.3"]  # the second build found the tree: nothing downloaded
    assert sorted(p.name for p in (cache / release.SOURCES).iterdir()) == \
        ["flash_attn-2.8.3", "flash_attn-2.8.3.lock", "flash_attn-2.8.3.sha256"]  # no scratch left
    assert (cache / release.SOURCES).stat().st_mode & 0o077 == 0
    listed = run_cli("list")
    assert "sources" not in listed.output  # not a build: `flashbuild list` neither lists nor skips it


@pytest.mark.parametrize("profile", [[], ["--profile", "flash-attn-2"]])
def test_a_release_spec_is_named_by_its_release_line_with_or_without_a_profile(served, cache, profile):
    """--source flash-attn==X names its release line as a path to its tree does: without --profile (it once said the
    spec 'does not exist'), and with a profile of several lines (2.6.3 once was checked against the 2.8 layout)."""
    from test_releases import layout_tree

    for version, line in (("2.6.3", "flash-attn-2@2.6"), ("2.8.3", "flash-attn-2@2.8")):
        tree = layout_tree(cache.parent / "layouts", line, version)
        files = {str(f.relative_to(tree)): f.read_text() for f in tree.rglob("*") if f.is_file()}
        served.add(version, sdist_bytes(f"flash_attn-{version}", files))
        result = run_cli("build", "--source", f"flash-attn=={version}", *profile, *SPEC_ARGS[2:])
        assert result.exit_code == 0, result.output
        assert f"plan: {line} at {cache / release.SOURCES / f'flash_attn-{version}'}" in result.stdout
    assert served.calls == ["flash-attn==2.6.3", "flash-attn==2.8.3"]  # each fetched once
    described = run_cli("profiles", "--source", "flash-attn==2.6.3")
    assert described.exit_code == 0 and "detected: flash-attn-2@2.6" in described.stdout, described.output
    unknown = run_cli("profiles", "--source", "flash-attn==2.4.2")
    assert unknown.exit_code == 2 and "is not in" in unknown.stderr and "Traceback" not in unknown.output


@pytest.mark.parametrize("asked, near", [("2.4.2", "2.5.0"), ("9.9", "2.8.3.post2"), ("2.8.4", "2.8.3.post2"),
                                         ("2.5.9", "2.5.9.post1"), ("2.7.1", "2.7.1.post4"), ("2.7.5", "2.7.4.post1")])
def test_an_unrecorded_version_names_the_nearest_recorded_in_release_order(asked, near):
    with pytest.raises(SelectionError, match=rf"use --source flash-attn=={re.escape(near)}, or add the release"):
        release.resolve(f"flash-attn=={asked}", REPO / "configs" / release.TABLE)


def test_a_download_with_another_digest_is_refused_and_not_unpacked(served, cache):
    digest = served.add("2.8.3", sdist_bytes("flash_attn-2.8.3", fa2_files("2.8.3")))
    tampered = sdist_bytes("flash_attn-2.8.3", {**fa2_files("2.8.3"), "setup.py": "import os\n"})
    served.serve["2.8.3"] = tampered
    result = run_cli("build", "--source", "flash-attn==2.8.3", *SPEC_ARGS)
    assert result.exit_code == 1
    line = one_line(result)
    assert f"the downloaded flash_attn-2.8.3.tar.gz has sha256 {hashlib.sha256(tampered).hexdigest()}" in line
    assert f"{served.table_file} records {digest} for it: refusing to unpack it" in line
    assert sorted(p.name for p in (cache / release.SOURCES).iterdir()) == ["flash_attn-2.8.3.lock"]


def test_a_tree_unpacked_from_another_digest_is_fetched_again(served, cache):
    """The marker holds the digest the tree came from: a table fixed since then refetches."""
    served.add("2.8.3", sdist_bytes("flash_attn-2.8.3", fa2_files("2.8.3")))
    tree = release.fetch("flash-attn==2.8.3")
    (tree.parent / "flash_attn-2.8.3.sha256").write_text("0" * 64 + "\n")
    (tree / "stale").write_text("")
    assert release.fetch("flash-attn==2.8.3") == tree and not (tree / "stale").exists()
    assert served.calls == ["flash-attn==2.8.3"] * 2


def hostile(top: str, kind: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        ok = tarfile.TarInfo(f"{top}/setup.py")
        tar.addfile(ok, io.BytesIO(b""))
        info = tarfile.TarInfo({"dotdot": f"{top}/../../escaped", "absolute": "/tmp/escaped-flashbuild",
                                "outside": "other-1.0/setup.py", "symlink": f"{top}/link",
                                "hardlink": f"{top}/hard", "device": f"{top}/dev"}[kind])
        if kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        elif kind == "hardlink":
            info.type, info.linkname = tarfile.LNKTYPE, "/etc/passwd"
        elif kind == "device":
            info.type = tarfile.CHRTYPE
        tar.addfile(info, io.BytesIO(b"") if info.isfile() else None)
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "outside", "symlink", "hardlink", "device"])
def test_an_archive_with_a_member_outside_its_dir_or_not_a_plain_file_is_refused_whole(served, cache, kind):
    served.add("2.8.3", hostile("flash_attn-2.8.3", kind))
    with pytest.raises(release.DigestError, match="refusing to unpack it") as error:
        release.fetch("flash-attn==2.8.3")
    assert "flash_attn-2.8.3.tar.gz holds " in str(error.value)
    assert sorted(p.name for p in (cache / release.SOURCES).iterdir()) == ["flash_attn-2.8.3.lock"]
    assert not (cache / "escaped").exists() and not Path("/tmp/escaped-flashbuild").exists()


def test_an_archive_that_is_not_a_tarball_is_one_clear_error(served, cache):
    served.add("2.8.3", b"not a tarball")
    with pytest.raises(release.DigestError, match="cannot be unpacked .*run again to download it afresh"):
        release.fetch("flash-attn==2.8.3")


# ---------------------------------------------------------------- pip: the command and its failures

def fake_pip(monkeypatch, returncode: int, stderr: str):
    seen = {}

    def run(command, **kwargs):
        seen["command"], seen["env"] = command, kwargs["env"]
        seen["requirement"] = Path(command[command.index("-r") + 1]).read_text()
        return subprocess.CompletedProcess(command, returncode, "", stderr)

    monkeypatch.setattr(release.subprocess, "run", run)
    return seen


def test_pip_gets_the_pinned_digest_and_the_tables_environment(monkeypatch, cache):
    seen = fake_pip(monkeypatch, 1, "ERROR: Could not find a version that satisfies the requirement flash-attn==2.8.3")
    with pytest.raises(release.FetchError) as error:
        release.fetch("flash-attn==2.8.3")
    digest = release.resolve("flash-attn==2.8.3").sha256
    assert seen["requirement"] == f"flash-attn==2.8.3 --hash=sha256:{digest}\n"
    assert seen["env"]["FLASH_ATTENTION_SKIP_CUDA_BUILD"] == "TRUE"
    assert seen["command"][1:9] == ["-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                                    "--no-build-isolation", "--disable-pip-version-check"]
    message = str(error.value)
    assert "failed (ERROR: Could not find a version that satisfies the requirement flash-attn==2.8.3)" in message
    assert "check the network and the package index" in message and "or pass --source PATH" in message
    assert error.value.exit_code == 1


def test_pips_own_digest_refusal_is_a_digest_error(monkeypatch, cache):
    fake_pip(monkeypatch, 1, "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n"
                             "    flash-attn==2.8.3 from https://x/flash_attn-2.8.3.tar.gz:\n"
                             f"        Expected sha256 {'1' * 64}\n             Got        {'a' * 64}\n")
    with pytest.raises(release.DigestError, match=f"served a file whose sha256 is {'a' * 64}"):
        release.fetch("flash-attn==2.8.3")


def test_the_module_prints_the_fetched_trees_root(served, cache, capsys):
    served.add("2.8.3", sdist_bytes("flash_attn-2.8.3", fa2_files("2.8.3")))
    assert release.main(["flash-attn==2.8.3"]) == 0
    assert capsys.readouterr().out == f"{cache / release.SOURCES / 'flash_attn-2.8.3'}\n"
    assert release.main(["flash-attn==0.0.1"]) == 1
    assert "flash-attn 0.0.1 is not in" in capsys.readouterr().err
    assert release.main([]) == 2


# ---------------------------------------------------------------- the real index

def test_a_real_release_is_fetched_checked_and_unpacked():
    """flash-attn 2.6.3 (2.6 MB) from the package index, as tests/upstream.py's fa2_tree fetches any."""
    from upstream import fa2_tree

    tree = fa2_tree("2.6.3")
    assert '__version__ = "2.6.3"' in (tree / "flash_attn" / "__init__.py").read_text()
    assert (tree / "csrc" / "flash_attn" / "flash_api.cpp").is_file()
    marker = tree.parent / f"{tree.name}.sha256"
    if marker.is_file():  # fetched by release.fetch (not FLASHBUILD_FA2_SOURCE)
        assert marker.read_text().strip() == release.resolve("flash-attn==2.6.3", REPO / "configs" / release.TABLE).sha256


def test_a_cache_path_no_build_could_use_is_refused_before_anything_is_written(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(tmp_path / "bad\nname"))
    with pytest.raises(SelectionError, match="the cache path holds a newline or NUL"):
        release.fetch("flash-attn==2.8.3")
    assert list(tmp_path.iterdir()) == []
