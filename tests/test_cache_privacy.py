"""The cache is the user's alone and build.ninja takes no orders: a fresh cache is 0700 with 0600 files;
a foreign, shared or symlinked cache or entry is refused before anything is built in or imported from
it; list and clean survive odd entries and never leave the cache; no flag, path or launcher value can
add a command to build.ninja. End to end over real ninja and a stand-in nvcc (no CUDA needed)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.pipeline import cache as build_cache, graph
from flashbuild.errors import BuildError, SelectionError
from helpers import make_fake_cuda, run_cli

SLICE = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--no-local", "--no-softcap",
         "--compile-only"]


@pytest.fixture
def fake_cuda(tmp_path, fake_root, monkeypatch) -> Path:
    home = make_fake_cuda(tmp_path)
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("FAKE_NVCC_LOG", str(tmp_path / "nvcc.log"))
    return home


def run(*args, **environ):
    """The CLI in a child process (real exit code, real stderr)."""
    return subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True,
                          env={**os.environ, **environ}, timeout=120)


def modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.lstat().st_mode)}
    for path in root.rglob("*"):
        out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


# ---------------------------------------------------------------- privacy

def test_a_fresh_cache_is_0700_with_0600_files(cache, fake_cuda):
    result = run(*SLICE)
    assert result.returncode == 0, result.stderr
    found = modes(cache)
    assert found["."] == 0o700
    assert len(found) > 8
    for name, mode in found.items():
        assert mode & 0o077 == 0, f"{name} is {mode:o}"


@pytest.mark.parametrize("mode", [0o775, 0o777, 0o757])
def test_a_cache_root_others_can_write_is_refused(cache, fake_cuda, mode):
    cache.mkdir(mode=0o700)
    cache.chmod(mode)
    result = run(*SLICE)
    assert result.returncode == 2
    assert "refusing a cache that others could write into" in result.stderr and f"chmod 700 {cache}" in result.stderr
    assert list(cache.iterdir()) == []


def test_a_cache_root_of_another_user_is_refused(cache, monkeypatch):
    cache.mkdir(mode=0o700)
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 4242)
    with pytest.raises(SelectionError, match=r"belongs to uid \d+, not to you"):
        build_cache.cache_root()


def test_a_symlinked_build_entry_is_refused_not_built_through(cache, fake_cuda, tmp_path):
    first = run(*SLICE)
    assert first.returncode == 0, first.stderr
    entry = next(cache.iterdir())
    elsewhere = tmp_path / "elsewhere"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    result = run(*SLICE)
    assert result.returncode == 2
    assert "is a symbolic link: flashbuild never builds or imports through one" in result.stderr
    assert f"rm {entry}" in result.stderr


def test_a_build_entry_others_can_write_is_refused(cache, fake_cuda):
    assert run(*SLICE).returncode == 0
    entry = next(cache.iterdir())
    entry.chmod(0o777)
    result = run(*SLICE)
    assert result.returncode == 2 and "refusing a build dir that others could write into" in result.stderr


def test_load_never_imports_a_link_or_a_file_others_can_write(tmp_path):
    build_dir = tmp_path / "b"
    build_dir.mkdir(mode=0o700)
    real = build_dir / "real.so"
    real.write_text("x")
    real.chmod(0o600)
    build_cache.check_loadable(real)  # ours, private: fine
    link = build_dir / "_m.so"
    link.symlink_to(real)
    with pytest.raises(BuildError, match="is a symbolic link"):
        build_cache.check_loadable(link)
    real.chmod(0o666)
    with pytest.raises(BuildError, match="writable by others"):
        build_cache.check_loadable(real)


# ---------------------------------------------------------------- unusable cache or build dir

def test_cache_dir_set_to_a_file_is_one_clear_error(tmp_path, fake_cuda):
    a_file = tmp_path / "file"
    a_file.write_text("")
    result = run(*SLICE, FLASHBUILD_CACHE_DIR=str(a_file))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"FLASHBUILD_CACHE_DIR {a_file}: not a directory" in result.stderr
    under = run(*SLICE, FLASHBUILD_CACHE_DIR=str(a_file / "sub"))
    assert under.returncode == 2 and "cannot create it" in under.stderr and "Traceback" not in under.stderr


def test_a_read_only_cache_or_build_dir_is_one_clear_error(tmp_path, fake_root, monkeypatch):
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o700)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if Path(p) == read_only else real_access(p, m))
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(read_only))
    with pytest.raises(SelectionError, match="not writable by you"):
        build_cache.cache_root()
    with pytest.raises(SelectionError, match="--build-dir .*not writable by you"):
        build_cache.prepare_build_dir(read_only, in_cache=False)


def test_build_dir_under_a_file_is_one_clear_error(tmp_path, fake_cuda, cache):
    a_file = tmp_path / "file"
    a_file.write_text("")
    result = run(*SLICE, "--build-dir", str(a_file / "b"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"--build-dir {a_file / 'b'}: cannot be used (Not a directory)" in result.stderr


def test_dry_run_creates_nothing(cache, fake_cuda):
    assert run(*SLICE, "--dry-run").returncode == 0
    assert not cache.exists()


# ---------------------------------------------------------------- list and clean

def make_entry(root: Path, name: str, manifest) -> Path:
    from flashbuild.pipeline import cache as cache_module

    path = root / name
    path.mkdir(parents=True, mode=0o700)
    (path / "build.ninja").write_text("")
    (path / cache_module.MARKER).write_text(cache_module.MARKER_TEXT)  # what flashbuild writes into its entries
    if manifest is not None:
        (path / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return path


def test_list_and_clean_survive_odd_entries_and_never_leave_the_cache(cache, tmp_path):
    cache.mkdir(mode=0o700)
    good = make_entry(cache, "good", {"variants": ["fwd_hdim64_fp16_sm90"], "extension": None})
    bad_variants = make_entry(cache, "bad-variants", {"variants": 5})
    bad_json = make_entry(cache, "bad-json", "{not json")
    a_list = make_entry(cache, "a-list", [1, 2])
    escaping = make_entry(cache, "escaping", {"variants": [], "extension": "../../outside.so"})
    outside = make_entry(tmp_path, "outside", {"variants": ["x"]})  # looks like a build, outside the cache
    (cache / "link").symlink_to(outside)
    (cache / "a-file").write_text("")
    listed = run_cli("list")
    assert listed.exit_code == 0 and "Traceback" not in listed.output
    assert "link: a symbolic link, skipped" in listed.stderr and "a-file: not a build dir" in listed.stderr
    assert "manifest.json: variants is not a list of names" in listed.stdout
    assert "manifest.json: extension is not a file name" in listed.stdout
    as_json = run_cli("list", "--json")
    assert {b["key"] for b in json.loads(as_json.stdout)["builds"]} == {
        "good", "bad-variants", "bad-json", "a-list", "escaping"}
    cleaned = run_cli("clean", "--all")
    assert cleaned.exit_code == 0, cleaned.output
    for removed in (good, bad_variants, bad_json, a_list, escaping):
        assert not removed.exists()
    assert outside.is_dir() and (outside / "manifest.json").is_file()  # never followed
    assert (cache / "link").is_symlink() and (cache / "a-file").is_file()  # reported, left alone


def test_clean_of_a_key_that_is_a_link_is_refused(cache, tmp_path):
    cache.mkdir(mode=0o700)
    outside = make_entry(tmp_path, "outside", {"variants": []})
    (cache / "k").symlink_to(outside)
    result = run_cli("clean", "k")
    assert result.exit_code == 2 and "no cached build k" in result.stderr
    assert outside.is_dir()


# ---------------------------------------------------------------- build.ninja takes no orders

PAYLOAD = "-DX\nrule evil\n  command = touch {marker}\nbuild {marker}: evil\n#"


@pytest.mark.parametrize("where", ["flag", "config", "launcher", "build-dir", "cache-dir"])
def test_a_newline_never_reaches_build_ninja(where, cache, fake_cuda, tmp_path):
    marker = tmp_path / "pwned"
    payload = PAYLOAD.format(marker=marker)
    args, environ = list(SLICE), {}
    if where == "flag":
        args += ["--nvcc-flag", payload]
    elif where == "launcher":
        args += ["--launcher", payload]
    elif where == "build-dir":
        args += ["--build-dir", str(tmp_path / payload)]
    elif where == "cache-dir":
        environ["FLASHBUILD_CACHE_DIR"] = str(tmp_path / payload)
    else:
        config = tmp_path / "c.toml"
        config.write_text('[selection]\nhdim = 64\n[build]\nnvcc_flags = ["' + payload.replace("\n", "\\n") + '"]\n')
        args += ["--config", str(config)]
    result = run(*args, **environ)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "flashbuild: error:" in result.stderr
    assert not marker.exists()
    assert not list(tmp_path.rglob("build.ninja"))


def test_spaces_quotes_and_command_text_in_values_reach_the_compiler_literally(fake_cuda, tmp_path):
    """`$` in a ninja value, spaces, single quotes, `;` and `:` in a flag, the cache dir and the build dir
    arrive as written. (What nvcc's own shell would act on, `$`, backticks, `"`, is refused:
    test_build_safety.py.)"""
    marker = tmp_path / "pwned"
    flag = f"-DX=';touch {marker};' 'q' a:b"
    build_dir = tmp_path / "b x:y"
    result = run(*SLICE, "--nvcc-flag", flag, "--build-dir", str(build_dir),
                 FLASHBUILD_CACHE_DIR=str(tmp_path / "c che"))
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    calls = [json.loads(line) for line in (tmp_path / "nvcc.log").read_text().splitlines()]
    calls = [call for call in calls if "-DFLASHBUILD_EMBED_FATBIN" not in call]  # a kernel TU's fatbin embedding
    assert calls and all(flag in call for call in calls)
    assert all(any(a == f"-I{build_dir / 'generated'}" for a in call) for call in calls)


def test_graph_refuses_a_newline_that_got_past_the_callers():
    with pytest.raises(graph.UnsafeValueError):
        graph.shell(["-DX\nrule evil"])
    assert graph.shell(["a$b", "c d"]) == "'a$$b' 'c d'"
    assert graph.path("/x y/a$b:c") == "/x$ y/a$$b$:c"


def test_a_cache_root_and_build_dir_another_process_creates_first_are_used(tmp_path, monkeypatch):
    """Two processes building on a fresh cache both see it missing; the one that creates it second
    must go on with the directory the first made (CI saw `cannot create it (File exists)`)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(root))
    real_mkdir = Path.mkdir

    def raced_mkdir(self, mode=0o777, parents=False, exist_ok=False):
        real_mkdir(self, mode=0o700, parents=True, exist_ok=True)  # the other process, just before us
        return real_mkdir(self, mode=mode, parents=parents, exist_ok=exist_ok)

    monkeypatch.setattr(Path, "mkdir", raced_mkdir)
    assert build_cache.cache_root() == root
    entry = root / "sm80-fp16-h64-fwd-c0-fnone-00000000"
    assert build_cache.prepare_build_dir(entry, in_cache=True) == entry and entry.is_dir()
