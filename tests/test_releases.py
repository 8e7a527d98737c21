"""Release lines of the upstream profiles (configs/profiles/releases/): reading release files, the tree
naming its profile and release (sources/detect.py), `flashbuild profiles`, and per release what a slice
renders. Three tiers:
- layout-only trees (empty files, a version string) for every release and for trees of no release:
  always run, no network;
- the real trees (flash-attn sdists from the package index; FA3 hopper/ archived from a flash-attention
  git dir, tests/upstream.py): detected, planned, each rendered TU's template arguments equal to the
  tree's own instantiation file of that name, the tree unchanged; skipped naming why when unavailable;
- `compile`: one small TU of each release line through the profile with real nvcc (--compile-only).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.pipeline import builder, render
from flashbuild.errors import SelectionError
from flashbuild.sources import detect, profile as profiles, releases as releases_module
import switch_overlay
from helpers import REPO, requires_nvcc, run_cli
from upstream import fa2_tree, fa3_tree_at, tree_digest

# Releases users pin, each with the release line that serves it (the issue's table).
FA2_SDISTS = {"2.5.0": "2.5.0", "2.5.5": "2.5", "2.5.9.post1": "2.5", "2.6.0.post1": "2.6.0", "2.6.1": "2.6.0",
              "2.6.2": "2.6", "2.6.3": "2.6", "2.7.0.post2": "2.7",
              "2.7.3": "2.7", "2.7.4.post1": "2.7.4", "2.8.0.post2": "2.8", "2.8.2": "2.8", "2.8.3": "2.8",
              "2.8.3.post2": "2.8"}
FA3_REFS = {"v2.8.3": "3.0.0b1", "afc97c60": "3.0.0b1", "b02b07e1": "3.0.0-nopackage", "28ef22c9": "3.0.0-nopackage",
            "0251105a": "3.0.0", "c75d019d": "3.0.0"}  # hopper/__init__.py's
FA3_VERSIONS = {"3.0.0b1": "3.0.0.b1", "3.0.0-nopackage": "3.0.0", "3.0.0": "3.0.0"}
VERSION_H = "#define CUTLASS_MAJOR {0}\n#define CUTLASS_MINOR {1}\n#define CUTLASS_PATCH {2}\n"


def layout_tree(base: Path, release_id: str, version: str) -> Path:
    """A tree with the files `release_id` requires (empty), its version string, and a CUTLASS of the
    version it pins: what detection and planning read, nothing a compiler would."""
    tree = profiles.load(release_id)
    root = base / release_id.replace("@", "-")
    files = [*tree.required, *tree.api_sources, *(s.file for s in tree.support),
             *(g.replaces for g in tree.generated if g.replaces), "csrc/cutlass/include/cutlass/cutlass.h"]
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    for rel in tree.include_dirs:
        (root / rel).mkdir(parents=True, exist_ok=True)
    (root / tree.version_file).write_text(f'__version__ = "{version}"\n')
    cutlass = [int(p) for p in (tree.cutlass_version or "4.3").split(".")] + [0]
    (root / "csrc/cutlass/include/cutlass/version.h").write_text(VERSION_H.format(*cutlass[:3]))
    return root


def every_release() -> list[releases_module.Release]:
    return [r for name in profiles.available() for r in profiles.releases(name)]


@pytest.fixture(autouse=True)
def _no_cutlass_override(monkeypatch):
    monkeypatch.delenv("FLASHBUILD_FA3_CUTLASS", raising=False)


# ---------------------------------------------------------------- release files

def test_the_served_release_lines():
    assert [r.id for r in every_release()] == [
        "flash-attn-2@2.5.0", "flash-attn-2@2.5", "flash-attn-2@2.6.0", "flash-attn-2@2.6", "flash-attn-2@2.7", "flash-attn-2@2.7.4", "flash-attn-2@2.8",
        "flash-attn-3@3.0.0b1", "flash-attn-3@3.0.0-nopackage", "flash-attn-3@3.0.0"]
    for release in every_release():
        tree = profiles.load(release.id)
        assert tree.name == release.id and tree.family == release.profile and tree.release == release
        assert tree.version_file, f"{release.id}: a release line must read the tree's version"


@pytest.mark.parametrize("text, key", [
    ("[release]\nversions = { from = \"2.6\", below = \"2.6\" }\nserved = \"x\"\n", "release.versions"),
    ("[release]\nversions = { from = \"two\", below = \"3\" }\nserved = \"x\"\n", "release.versions"),
    ("[release]\nversions = { from = \"2.6\" }\nserved = \"x\"\n", "release.versions"),
    ("[release]\nversions = { from = \"2.6\", below = \"2.7\" }\n", "release.served"),
    ("[release]\nversions = { from = \"2.6\", below = \"2.7\" }\nserved = \"x\"\nremove = [\"a b\"]\n", "release.remove"),
    ("[release]\nversions = { from = \"2.6\", below = \"2.7\" }\nserved = \"x\"\nabsent = [\"../x\"]\n", "release.absent"),
    ("[release]\nversions = { from = \"2.6\", below = \"2.7\" }\nserved = \"x\"\nextends = \"y\"\n", "release.extends"),
    ("[release]\nversions = { from = \"2.6\", below = \"2.7\" }\nserved = \"x\"\n[other]\n", "other"),
    ("[release\n", "not valid TOML"),
])
def test_a_bad_release_file_is_an_error_naming_file_and_key(tmp_path, text, key):
    folder = tmp_path / "releases" / "p"
    folder.mkdir(parents=True)
    (folder / "2.6.toml").write_text(text)
    with pytest.raises(SelectionError, match=re.escape(key)) as error:
        releases_module.releases(tmp_path, "p")
    assert str(folder / "2.6.toml") in str(error.value)


def test_overlapping_release_lines_are_refused_unless_their_layouts_differ(tmp_path):
    folder = tmp_path / "releases" / "p"
    folder.mkdir(parents=True)
    (folder / "2.6.toml").write_text('[release]\nversions = { from = "2.6", below = "2.8" }\nserved = "a"\n')
    (folder / "2.7.toml").write_text('[release]\nversions = { from = "2.7", below = "2.9" }\nserved = "b"\n')
    with pytest.raises(SelectionError, match="overlap"):
        releases_module.releases(tmp_path, "p")
    (folder / "2.7.toml").write_text('[release]\nversions = { from = "2.7", below = "2.9" }\nserved = "b"\n'
                                     'absent = ["new.h"]\n')
    assert [r.name for r in releases_module.releases(tmp_path, "p")] == ["2.6", "2.7"]


def test_a_release_that_extends_another_applies_over_it(tmp_path):
    """release.extends: flash-attn-2@2.5.0 is the 2.5 line with four switch entries replaced by plain sites; an
    extends naming no line, or a line that itself extends, is refused naming the file and the key."""
    line = profiles.load("flash-attn-2@2.5.0")
    parent = profiles.load("flash-attn-2@2.5")
    assert line.hdims == parent.hdims and line.causal == parent.causal == "runtime"
    dropped = set(parent.switches.devices) - set(line.switches.devices)  # the 64 x 32 hdim-256 kernel 2.5.0 lacks
    assert set(line.switches.devices) < set(parent.switches.devices) and len(dropped) == 1
    assert [(k.launcher, k.hdim) for k in dropped] == [("run_mha_bwd_hdim256", 256)]
    sites = {(m.macro, m.site) for m in line.switches.macros}
    assert {("BOOL_SWITCH", s) for s in ("Is_local", "Is_dropout", "Has_alibi", "IsEvenKConst", "Is_causal")} <= sites
    assert not {n for n, _ in sites} & {"LOCAL_SWITCH", "DROPOUT_SWITCH", "ALIBI_SWITCH", "EVENK_SWITCH"}
    folder = tmp_path / "releases" / "flash-attn-2"
    folder.mkdir(parents=True)
    body = '[release]\nversions = {{ from = "{0}", below = "{1}" }}\nserved = "x"\n{2}'
    (folder / "2.5.toml").write_text(body.format("2.5", "2.6", ""))
    (folder / "2.6.toml").write_text(body.format("2.6", "2.7", 'extends = "2.4"\n'))
    with pytest.raises(SelectionError, match=r"2\.6\.toml: key release\.extends: '2\.4' is no release line of "
                                             r"flash-attn-2 \(lines that extend none: 2\.5\)"):
        releases_module.releases(tmp_path, "flash-attn-2")
    (folder / "2.6.toml").write_text(body.format("2.6", "2.7", 'extends = "2.5"\n'))
    (folder / "2.7.toml").write_text(body.format("2.7", "2.8", 'extends = "2.6"\n'))
    with pytest.raises(SelectionError, match=r"2\.7\.toml: key release\.extends: '2\.6' is itself an extension"):
        releases_module.releases(tmp_path, "flash-attn-2")
    (folder / "2.7.toml").write_text(body.format("2.7", "2.8", 'extends = ["2.5"]\n'))
    with pytest.raises(SelectionError, match=r"key release\.extends: expected the name of another release line"):
        releases_module.releases(tmp_path, "flash-attn-2")


def test_a_release_applies_its_keys_over_the_profile():
    release = releases_module.Release("p", "1.0", Path("1.0.toml"), "1.0", "1.1", "x", ("a.drop",), (),
                                      {"a": {"keep": 2, "new": [1]}, "b": "x"})
    base = {"a": {"keep": 1, "drop": 1, "other": 3}, "b": "y", "c": {"d": 1}}
    assert releases_module.apply(base, release) == {"a": {"keep": 2, "other": 3, "new": [1]}, "b": "x", "c": {"d": 1}}
    assert base["a"]["drop"] == 1  # the profile's data is not changed
    missing = releases_module.Release("p", "1.0", Path("1.0.toml"), "1.0", "1.1", "x", ("a.nothing",), (), {})
    with pytest.raises(SelectionError, match="release.remove names a.nothing"):
        releases_module.apply(base, missing)


def test_keyed_lists_merge_by_key_and_remove_drops_one_entry():
    """[[switches.macro]] merges by name (and site), [[generated]] by file; key[NAME] removes one entry
    (or one string of a list); every other list replaces."""
    macros = [{"name": "X", "feature": "a"}, {"name": "BOOL_SWITCH", "site": "S", "feature": "b"}]
    base = {"switches": {"features": ["a", "b"], "macro": macros},
            "generated": [{"file": "one.h", "template": "1"}, {"file": "two.py", "template": "2"}], "names": [1, 2]}
    release = releases_module.Release(
        "p", "1.0", Path("1.0.toml"), "1.0", "1.1", "x",
        ("switches.macro[BOOL_SWITCH:S]", "switches.features[b]", "generated[two.py]"), (),
        {"switches": {"macro": [{"name": "X", "feature": "c"}, {"name": "BOOL_SWITCH", "site": "T", "feature": "a"}]},
         "generated": [{"file": "one.h", "template": "new"}], "names": [3]})
    assert releases_module.apply(base, release) == {
        "switches": {"features": ["a"], "macro": [{"name": "X", "feature": "c"},
                                                  {"name": "BOOL_SWITCH", "site": "T", "feature": "a"}]},
        "generated": [{"file": "one.h", "template": "new"}], "names": [3]}
    for bad, why in [("switches.macro[NOPE]", "no entry NOPE in switches.macro; its entries: X, BOOL_SWITCH:S"),
                     ("names[1]", "no entry 1 in names"), ("switches.nothing[X]", "no key switches.nothing"),
                     ("switches.features.a[x]", "no key switches.features.a")]:
        wrong = releases_module.Release("p", "1.0", Path("1.0.toml"), "1.0", "1.1", "x", (bad,), (), {})
        with pytest.raises(SelectionError, match=re.escape(why)):
            releases_module.apply(base, wrong)


def test_a_release_switch_site_of_another_shape_is_refused(tmp_path):
    """A spelled-out BOOL_SWITCH site has a true then a false branch (the overlay's site table)."""
    site = {"name": "BOOL_SWITCH", "site": "Is_causal", "params": ["COND", "CONST_NAME"], "branches": [
        {"set": {"CONST_NAME": False}, "when": "COND", "needs": "not_causal", "call": "x"},
        {"set": {"CONST_NAME": True}, "needs": "causal", "call": "y"}]}
    release = releases_module.Release("flash-attn-2", "9.9", tmp_path / "9.9.toml", "9.9", "9.10", "x", (), (),
                                      {"switches": {"macro": [site]}})
    base = profiles.profiles_dir() / "flash-attn-2.toml"
    shape = r"switches\.macro\[\d+\]\.branches: expected at a BOOL_SWITCH site"
    with pytest.raises(SelectionError, match=shape) as error:
        profiles.read_profile(base, release)
    assert f"{base} with {tmp_path / '9.9.toml'}" in str(error.value)
    # a removed feature a switch still needs: the error names both files too
    removed = releases_module.Release("flash-attn-2", "9.9", tmp_path / "9.9.toml", "9.9", "9.10", "x",
                                      ("switches.features[split]",), (), {})
    with pytest.raises(SelectionError, match=r"switches\.macro\[\d+\]\.feature: .*found 'split'") as error:
        profiles.read_profile(base, removed)
    assert f"{base} with {tmp_path / '9.9.toml'}" in str(error.value)


@pytest.mark.parametrize("older, newer", [("3.0.0.b1", "3.0.0"), ("3.0.0b1", "3.0.0.b2"), ("2.5.9", "2.5.9.post1"),
                                          ("2.8", "2.8.0.post2"), ("2.8.3", "2.8.3.post1"), ("2.9", "2.10"),
                                          ("2.8.3+cu12torch2.4", "2.8.4")])
def test_versions_sort_as_releases_do(older, newer):
    assert releases_module.parse_version(older) < releases_module.parse_version(newer)


@pytest.mark.parametrize("text", ["", "two", "2.8.x", "2..8", "v2.8.3", None, 2.8])
def test_a_version_that_is_none_parses_to_none(text):
    assert releases_module.parse_version(text) is None


def test_a_release_that_is_not_served_names_the_nearest():
    with pytest.raises(SelectionError, match=r"no release 2\.4 .*nearest is flash-attn-2@2\.5"):
        profiles.load("flash-attn-2@2.4")
    with pytest.raises(SelectionError, match=r"no release 3\.1 .*nearest is flash-attn-3@3\.0\.0 "):
        profiles.load("flash-attn-3@3.1")
    result = run_cli("--source", ".", "--profile", "flash-attn-2@2.9", "--hdim", "64", "--dry-run")
    assert result.exit_code == 2 and "nearest is flash-attn-2@2.8" in result.stderr and "Traceback" not in result.output


# ---------------------------------------------------------------- detection on layout-only trees

@pytest.mark.parametrize("release_id, version", [
    *[(f"flash-attn-2@{line}", version) for version, line in FA2_SDISTS.items()],
    ("flash-attn-2@2.5", "2.5.4"), ("flash-attn-2@2.8", "2.8.3+cu12torch2.4cxx11abiFALSE"),
    *[(f"flash-attn-3@{line}", FA3_VERSIONS[line]) for line in sorted(set(FA3_REFS.values()))],
])
def test_every_release_names_itself(tmp_path, release_id, version):
    tree = layout_tree(tmp_path, release_id, version)
    assert detect.detect(tree) == release_id
    family = release_id.split("@")[0]
    assert detect.choose(str(tree), family) == release_id            # --profile flash-attn-2: its release
    assert detect.choose(str(tree), release_id) == release_id        # a release named: as it is
    result = run_cli("--source", str(tree), "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"(profile {release_id}: " in result.stdout
    assert f"release    {release_id.split('@')[1]} of {family} (" in result.stdout


@pytest.mark.parametrize("layout, version, nearest", [
    ("flash-attn-2@2.5", "2.4.2", "flash-attn-2@2.5"),    # older than any: the oldest
    ("flash-attn-2@2.8", "2.9.0", "flash-attn-2@2.8"),    # newer than any: the newest
    ("flash-attn-2@2.8", "3.0.0b1", "flash-attn-2@2.8"),
    ("flash-attn-3@3.0.0", "3.1.0", "flash-attn-3@3.0.0"),
    ("flash-attn-3@3.0.0b1", "3.0.0a1", "flash-attn-3@3.0.0b1"),
])
def test_an_unknown_release_is_refused_naming_the_nearest(tmp_path, layout, version, nearest):
    tree = layout_tree(tmp_path, layout, version)
    with pytest.raises(SelectionError) as error:
        detect.detect(tree)
    message = str(error.value)
    assert f"says {version}" in message and f"the nearest served release is {nearest}" in message
    assert "docs/releases.md" in message and f"flashbuild profiles --source {tree}" in message
    result = run_cli("--source", str(tree), "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--dry-run")
    assert result.exit_code == 2 and f"the nearest served release is {nearest}" in result.stderr
    assert "Traceback" not in result.output


def test_a_stray_version_file_of_another_kind_of_tree_does_not_name_the_tree(tmp_path):
    """The flash-attn sdists carry hopper/__init__.py (3.0.0.b1) without the rest of hopper/: an FA2 tree of
    an unknown release is still an FA2 tree, refused naming FA2's nearest release."""
    tree = layout_tree(tmp_path, "flash-attn-2@2.8", "2.9.0")
    (tree / "hopper").mkdir()
    (tree / "hopper" / "__init__.py").write_text('__version__ = "3.0.0.b1"\n')
    with pytest.raises(SelectionError, match=r"a flash-attn-2 tree .*nearest served release is flash-attn-2@2\.8 "):
        detect.detect(tree)
    (tree / "flash_attn" / "__init__.py").write_text('__version__ = "2.8.1"\n')
    assert detect.detect(tree) == "flash-attn-2@2.8"


def test_a_tree_of_a_later_layout_with_an_older_version_says_what_differs(tmp_path):
    tree = layout_tree(tmp_path, "flash-attn-2@2.8", "2.6.3")   # namespace_config.h, which 2.6 never had
    with pytest.raises(SelectionError, match=r"nearest served release is flash-attn-2@2\.6 .*has "
                                             r"csrc/flash_attn/src/namespace_config\.h"):
        detect.detect(tree)


def test_a_tree_of_no_profile_is_refused_naming_what_each_looks_for(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run_cli("--source", str(tmp_path / "empty"), "--hdim", "64", "--arch", "sm90", "--dry-run")
    assert result.exit_code == 2 and "is no kernel tree flashbuild has a profile for" in result.stderr
    assert "flash-attn-2 needs csrc/flash_attn/src/flash.h" in result.stderr and "hopper/flash.h" in result.stderr
    missing = run_cli("--source", str(tmp_path / "nowhere"), "--hdim", "64", "--arch", "sm90", "--dry-run")
    assert missing.exit_code == 2 and "does not exist" in missing.output and "Traceback" not in missing.output


def test_a_release_that_lacks_a_file_is_named_with_the_profile_key(tmp_path):
    tree = layout_tree(tmp_path, "flash-attn-2@2.6", "2.6.3")
    (tree / "csrc/flash_attn/flash_api.cpp").unlink()
    with pytest.raises(SelectionError, match=r"does not match profile flash-attn-2@2\.6 .*flash_api\.cpp "
                                             r"\(profile keys tree\.required / extension\.sources\)"):
        builder.parse_request(source=tree, hdim=64, dtype="fp16", arch="sm90")


@pytest.mark.parametrize("release_id", ["flash-attn-2@2.6", "flash-attn-3@3.0.0b1"])
def test_another_layout_with_a_served_version_names_what_the_release_serves(tmp_path, release_id):
    """A tree whose version a release serves but whose layout lacks its files (hopper/ of flash-attention v2.7.x says
    3.0.0.b1 as v2.8.x does, without v2.8's flash_prepare_scheduler.cu): the build names the files, what the release
    serves and how a layout is added; `flashbuild profiles --source` says why none is detected. A tree that lacks only
    its CUTLASS gets the CUTLASS fix alone."""
    version = {"flash-attn-2@2.6": "2.6.3", "flash-attn-3@3.0.0b1": "3.0.0.b1"}[release_id]
    tree = layout_tree(tmp_path, release_id, version)
    release = profiles.load(release_id)
    dropped = release.support[-1].file if release.support else release.required[-1]
    (tree / dropped).unlink()
    built = run_cli("--source", str(tree), "--hdim", "64", "--arch", "sm90", "--dry-run")
    assert built.exit_code == 2 and "Traceback" not in built.output, built.output
    assert dropped in built.stderr and f"{release_id} serves {release.release.served}" in built.stderr
    assert "docs/releases.md" in built.stderr and f"flashbuild profiles --source {tree}" in built.stderr
    described = run_cli("profiles", "--source", str(tree))
    assert described.exit_code == 0, described.output
    assert f"detected: none: its version is {release_id}'s, but it lacks files" in described.stdout
    (tree / dropped).write_text("")
    cutlass = tree / "csrc/cutlass/include/cutlass/cutlass.h"
    if release.cutlass != "wheel":
        cutlass.unlink()
        no_cutlass = run_cli("--source", str(tree), "--hdim", "64", "--arch", "sm90", "--dry-run")
        assert no_cutlass.exit_code == 2 and "cutlass.h" in no_cutlass.stderr, no_cutlass.output
        assert "serves" not in no_cutlass.stderr and "Traceback" not in no_cutlass.output


def test_an_explicit_profile_that_does_not_fit_still_refuses(tmp_path):
    fa2 = layout_tree(tmp_path, "flash-attn-2@2.6", "2.6.3")
    other_family = run_cli("--source", str(fa2), "--profile", "flash-attn-3", "--hdim", "64", "--arch", "sm90",
                           "--dry-run")
    assert other_family.exit_code == 2 and "flash-attn-3" in other_family.stderr
    other_release = run_cli("--source", str(fa2), "--profile", "flash-attn-2@2.8", "--hdim", "64", "--arch", "sm90",
                            "--dry-run")
    assert other_release.exit_code == 2 and "says release 2.6.3" in other_release.stderr
    assert "does not match profile flash-attn-2@2.8" in other_release.stderr
    assert "nearest served release is flash-attn-2@2.6" in other_release.stderr
    assert "Traceback" not in other_family.output + other_release.output


def test_flashbuild_profiles_lists_releases_and_says_why_each_does_not_match(tmp_path):
    listing = run_cli("profiles")
    assert listing.exit_code == 0
    for release in every_release():
        assert release.id in listing.stdout and release.served in listing.stdout
    tree = layout_tree(tmp_path, "flash-attn-2@2.6", "2.6.3")
    result = run_cli("profiles", "--source", str(tree))
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("  flash-attn-")
            and "@" in line.split()[0] and ("MATCHES" in line or " no: " in line)}
    assert "MATCHES" in rows["flash-attn-2@2.6"]
    assert "version 2.6.3 is not >= 2.8, < 2.9" in rows["flash-attn-2@2.8"]
    assert "no csrc/flash_attn/src/namespace_config.h" in rows["flash-attn-2@2.7.4"]
    assert "version 2.6.3 is not >= 2.7, < 2.7.4" in rows["flash-attn-2@2.7"]
    assert "no hopper/flash.h" in rows["flash-attn-3@3.0.0"]
    assert "detected: flash-attn-2@2.6" in result.stdout
    bad = run_cli("profiles", "--source", str(tmp_path / "nowhere"))
    assert bad.exit_code == 2 and "does not exist" in bad.output


# ---------------------------------------------------------------- what each release renders

def _texts(tree: Path, **kwargs) -> tuple:
    kwargs = {"arch": "sm90", "hdim": 64, "dtype": "fp16", **kwargs}
    plan = builder.make_plan(*builder.parse_request(source=tree, **kwargs))
    return plan, render.render_texts(plan.selection, build_key=plan.key, profile=plan.profile,
                                     context=builder.tree_context(plan))


def test_fa2_2_5_decides_causal_inside_each_tu_at_global_scope_and_has_no_softcap(tmp_path):
    tree = layout_tree(tmp_path, "flash-attn-2@2.5", "2.5.9.post1")
    plan, texts = _texts(tree, direction="fwd", causal="both")
    assert [u.name for u in plan.units] == ["flash_fwd_hdim64_fp16_sm80"]   # one TU: causal and not
    tu = texts["flash_fwd_hdim64_fp16_sm80.cu"]
    assert "void run_mha_fwd_<cutlass::half_t, 64>(Flash_fwd_params& params" in tu and "NAMESPACE" not in tu
    stubs = texts[render.MISSING_TU + ".cu"]
    assert "void run_mha_bwd_<cutlass::half_t, 64>(Flash_bwd_params&" in stubs and "NAMESPACE" not in stubs
    assert "run_mha_fwd_splitkv_dispatch<cutlass::half_t, 64>(" in stubs and "run_mha_fwd_<" not in stubs
    assert "holds no backward kernel for head dim 64, fp16, causal and not (it holds fwd" in stubs
    assert "softcap" not in plan.profile.features and "softcap" not in plan.profile.tests.features
    with pytest.raises(SelectionError, match="softcap"):
        builder.parse_request(source=tree, hdim=64, arch="sm90", features="softcap")


@pytest.mark.parametrize("release, version", [("2.6", "2.6.3"), ("2.7", "2.7.3")])
def test_fa2_2_6_to_2_7_3_keep_causal_tus_at_global_scope(tmp_path, release, version):
    tree = layout_tree(tmp_path, f"flash-attn-2@{release}", version)
    plan, texts = _texts(tree, direction="fwd", causal="on")
    assert [u.name for u in plan.units] == ["flash_fwd_hdim64_fp16_causal_sm80"]
    tu = texts["flash_fwd_hdim64_fp16_causal_sm80.cu"]
    assert "void run_mha_fwd_<cutlass::half_t, 64, true>(" in tu and "NAMESPACE" not in tu
    assert '#include "namespace_config.h"' not in tu
    assert "void run_mha_fwd_<cutlass::half_t, 64, false>(" in texts[render.MISSING_TU + ".cu"]


def test_fa2_2_6_0_has_causal_forward_tus_and_a_backward_that_decides_causal_inside(tmp_path):
    """axes.causal_runtime = ["bwd"]: one forward / split-KV TU per causal value, one backward TU for both (its
    Is_causal site narrowed); the stubs follow the same split."""
    tree = layout_tree(tmp_path, "flash-attn-2@2.6.0", "2.6.1")
    plan, texts = _texts(tree, direction="fwd,bwd", causal="on", features="none")
    assert [u.name for u in plan.units] == ["flash_fwd_hdim64_fp16_causal_sm80", "flash_bwd_hdim64_fp16_sm80"]
    assert [u.causal for u in plan.units] == [True, None]
    assert "void run_mha_bwd_<cutlass::half_t, 64>(" in texts["flash_bwd_hdim64_fp16_sm80.cu"]
    stubs = texts[render.MISSING_TU + ".cu"]
    assert "void run_mha_fwd_<cutlass::half_t, 64, false>(" in stubs and "run_mha_bwd_" not in stubs
    assert "void run_mha_fwd_splitkv_dispatch<cutlass::half_t, 64, true>(" in stubs


@pytest.mark.parametrize("axes, why", [('causal = "runtime"\ncausal_runtime = ["bwd"]', "with causal = \"tu\""),
                                       ('causal_runtime = ["backward"]', "directions of axes.direction")])
def test_causal_runtime_names_directions_of_a_tu_causal_axis(tmp_path, axes, why):
    text = (REPO / "configs/profiles/flash-attn-2.toml").read_text().replace('causal = "tu"', axes, 1)
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(SelectionError, match=rf"key axes\.(causal_runtime|causal): expected .*{re.escape(why)}"):
        profiles.load(path)


@pytest.mark.parametrize("release, version", [("2.7.4", "2.7.4.post1"), ("2.8", "2.8.1")])
def test_fa2_2_7_4_on_is_in_flash_namespace(tmp_path, release, version):
    tree = layout_tree(tmp_path, f"flash-attn-2@{release}", version)
    _, texts = _texts(tree, direction="fwd", causal="on")
    assert "namespace FLASH_NAMESPACE" in texts["flash_fwd_hdim64_fp16_causal_sm80.cu"]


def test_fa3_before_the_stable_abi_links_flash_api_cpp_into_a_package_of_its_own(tmp_path):
    tree = layout_tree(tmp_path, "flash-attn-3@3.0.0b1", "3.0.0.b1")
    plan, texts = _texts(tree, direction="fwd", features="none")
    assert plan.profile.api_sources == ("hopper/flash_api.cpp",)
    assert not any("TORCH_TARGET_VERSION" in f for f in plan.profile.cxx_flags)
    assert plan.profile.cutlass_version == "4.0"
    package = texts["flash_attn_3/__init__.py"]
    assert "package_namespace.py.j2" in package and "exec(" not in package
    assert "flash_attn_config.py" not in texts
    head = layout_tree(tmp_path, "flash-attn-3@3.0.0", "3.0.0")
    plan_head, texts_head = _texts(head, direction="fwd", features="none")
    assert plan_head.profile.api_sources == ("hopper/flash_api_stable.cpp",) and "flash_attn_config.py" in texts_head
    # the same kernels either side: the TUs render alike
    assert [u.name for u in plan.units] == [u.name for u in plan_head.units]
    # between them (e2743ab5 - 002cce0a^): head's API and config, no package of the tree's
    middle = layout_tree(tmp_path, "flash-attn-3@3.0.0-nopackage", "3.0.0")
    plan_middle, texts_middle = _texts(middle, direction="fwd", features="none")
    assert plan_middle.profile.api_sources == ("hopper/flash_api_stable.cpp",) and "flash_attn_config.py" in texts_middle
    assert "package_namespace.py.j2" in texts_middle["flash_attn_3/__init__.py"]
    assert plan_middle.profile.cutlass_version == "4.3"


# ---------------------------------------------------------------- the real trees

def _real_fa2(version: str) -> Path:
    tree = fa2_tree(version)
    found = re.search(r'__version__ = "([^"]+)"', (tree / "flash_attn" / "__init__.py").read_text())
    if not found or found.group(1) != version:
        pytest.skip(f"FLASHBUILD_FA2_SOURCE={tree} is flash-attn {found and found.group(1)}, not {version}")
    return tree


SIGNATURE = re.compile(r"(run_mha_(?:fwd|bwd)_|run_mha_fwd_splitkv_dispatch)\s*<([^>]*)>")


def _signatures(text: str) -> set[tuple[str, str]]:
    """The instantiations a TU specializes: (function, template arguments without spaces)."""
    return {(name, re.sub(r"\s+", "", args)) for name, args in SIGNATURE.findall(text)}


def _same_as_the_trees_own(texts: dict, plan, instantiations: Path) -> int:
    """Each rendered TU instantiates what the tree's own file of that name does (namespace too)."""
    compared = 0
    for unit in plan.units:
        own = instantiations / f"{unit.name}.cu"
        if unit.source is not None:
            continue
        assert own.is_file(), f"{unit.name}: the tree has no such file; the release's TU naming is wrong"
        theirs, ours = own.read_text(), texts[f"{unit.name}.cu"]
        assert _signatures(ours) == _signatures(theirs) and _signatures(ours), unit.name
        assert ("FLASH_NAMESPACE" in ours) == ("FLASH_NAMESPACE" in theirs), unit.name
        compared += 1
    return compared


@pytest.mark.parametrize("version", sorted(FA2_SDISTS))
def test_each_fa2_sdist_is_detected_planned_and_rendered_as_its_own_files(tmp_path, version):
    tree = _real_fa2(version)
    before = tree_digest(tree)
    assert detect.detect(tree) == f"flash-attn-2@{FA2_SDISTS[version]}"
    dry = run_cli("--source", str(tree), "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--dry-run")
    assert dry.exit_code == 0 and f"(profile flash-attn-2@{FA2_SDISTS[version]}: " in dry.stdout
    every = ",".join(map(str, profiles.load(f"flash-attn-2@{FA2_SDISTS[version]}").hdims))  # the tree's own sizes
    plan, texts = _texts(tree, hdim=every, dtype="fp16,bf16", direction="fwd,bwd,splitkv", causal="both")
    assert _same_as_the_trees_own(texts, plan, tree / "csrc" / "flash_attn" / "src") == len(plan.units) >= 36
    assert tree_digest(tree) == before


@pytest.mark.parametrize("ref", sorted(FA3_REFS))
def test_each_fa3_commit_is_detected_planned_and_rendered_as_its_own_files(tmp_path, monkeypatch, ref):
    tree, cutlass = fa3_tree_at(ref)
    before = tree_digest(tree / "hopper")
    monkeypatch.setenv("FLASHBUILD_FA3_CUTLASS", str(cutlass))
    assert detect.detect(tree) == f"flash-attn-3@{FA3_REFS[ref]}"
    dry = run_cli("--source", str(tree), "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--dry-run")
    assert dry.exit_code == 0 and f"(profile flash-attn-3@{FA3_REFS[ref]}: " in dry.stdout, dry.output
    plan, texts = _texts(tree, hdim="64,128", dtype="fp16,bf16", direction="fwd,bwd")
    assert _same_as_the_trees_own(texts, plan, tree / "hopper" / "instantiations") >= 40
    assert tree_digest(tree / "hopper") == before


# ---------------------------------------------------------------- each release's switch overlay against its tree

# Switches of the launch templates no selection narrows (docs/switches.md, "Not narrowed").
UNNARROWED = {"flash-attn-2": set(),
              "flash-attn-3": {("ARCH_SWITCH", None), ("VCOLMAJOR_SWITCH", None), ("BOOL_SWITCH", "Varlen")}}
OFF_ONLY, ON_ONLY = ("miss", {"CONST_NAME": False}), ({"CONST_NAME": True}, "miss")
# What --features none keeps of every switch a release line may have, per causal value: branches in the
# tree's order, each the constants it binds or "miss" (a throw of the slice's error). A site: (flag set, unset).
NONE_KEEPS = {
    "flash-attn-2": {
        "macros": {"LOCAL_SWITCH": OFF_ONLY, "SOFTCAP_SWITCH": OFF_ONLY, "DROPOUT_SWITCH": OFF_ONLY,
                   "ALIBI_SWITCH": OFF_ONLY, "EVENK_SWITCH": ON_ONLY},
        "sites": {"IsEvenMNConst": (False, False), "ReturnSoftmaxConst": ("miss", False), "Split": ("miss", False),
                  "Append_KV": ("miss", False),
                  # 2.5.0's plain sites for what later releases switch with the named macros above
                  "Is_local": ("miss", False), "Is_dropout": ("miss", False), "Has_alibi": ("miss", False),
                  "IsEvenKConst": (True, "miss")},
        "causal": {"on": {"Is_causal": (True, "miss")}, "off": {"Is_causal": ("miss", False)}},
    },
    "flash-attn-3": {
        "macros": {"VARLEN_SWITCH": OFF_ONLY, "APPENDKV_SWITCH": OFF_ONLY,
                   "CLUSTER_SWITCH": ({"CONST_NAME": False}, {"CONST_NAME": False})},
        "sites": {"HasQV_": ("miss", False), "Deterministic_": ("miss", False), "GQA": ("miss", False)},
        "causal": {"on": {"CAUSAL_LOCAL_SWITCH": ({"CAUSAL_CONST_NAME": True, "LOCAL_CONST_NAME": False}, "miss",
                                                  "miss")},
                   "off": {"CAUSAL_LOCAL_SWITCH": ("miss", "miss",
                                                   {"CAUSAL_CONST_NAME": False, "LOCAL_CONST_NAME": False})}},
    },
}


def _tree_switches(tree: Path, profile) -> tuple[set, dict]:
    """What the tree's launch templates call, and the parameter counts its switch header defines."""
    folder = tree / ("hopper" if profile.family == "flash-attn-3" else "csrc/flash_attn/src")
    launch = sorted(folder.glob("*launch_template.h"))
    assert launch, f"{folder}: no launch templates"
    (header,) = [tree / d / profile.switches.header for d in profile.include_dirs
                 if (tree / d / profile.switches.header).is_file()][:1]
    return switch_overlay.tree_uses(launch), switch_overlay.tree_arity(header)


def _overlay(tree: Path, **kwargs) -> tuple:
    plan, texts = _texts(tree, hdim=64, dtype="fp16", direction="fwd,bwd", **kwargs)
    for unit in plan.units:  # every instantiation TU includes the overlay before the tree's launch template
        if unit.source is None:
            text = texts[f"{unit.name}.cu"]
            assert 0 <= text.find('#include "flashbuild_switches.h"') < text.find("_launch_template.h"), unit.name
    text = texts[plan.profile.switches.overlay]
    return plan.profile, switch_overlay.overlay_macros(text), switch_overlay.overlay_sites(text)


def _check_overlay_against_tree(tree: Path) -> str:
    profile, macros, sites = _overlay(tree)
    uses, arity = _tree_switches(tree, profile)
    named = {(m, None) for m in macros} | {("BOOL_SWITCH", s) for s in sites}
    # every narrowed macro and site is one the tree's launch templates call, with the tree's parameters
    assert named <= uses, f"{profile.name}: the overlay narrows {sorted(named - uses, key=str)}, not in the tree"
    assert uses - named - UNNARROWED[profile.family] == set(), f"{profile.name}: switches not narrowed"
    for macro, (params, _) in macros.items():
        assert arity.get(macro) == {len(params)}, (profile.name, macro, arity.get(macro), params)
    if sites:
        assert arity.get("BOOL_SWITCH") == {2}
    # the default selection (every feature, causal both) is the tree's own build: every branch, as it binds
    for macro, (_, branches) in macros.items():
        assert "miss" not in branches and len({str(b) for b in branches}) == len(branches), (macro, branches)
    assert all(kept == (True, False) for kept in sites.values()), sites
    # --features none with one causal value keeps exactly the expected branches
    expected = NONE_KEEPS[profile.family]
    for causal in ("on", "off"):
        _, macros, sites = _overlay(tree, causal=causal, features="none")
        want = {**expected["macros"], **expected["sites"], **expected["causal"][causal]}
        got = {**{m: b for m, (_, b) in macros.items()}, **sites}
        assert got == {k: v for k, v in want.items() if k in got}, (profile.name, causal)
        assert set(got) == {k for k in want if ("BOOL_SWITCH", k) in uses or (k, None) in uses}, (profile.name, causal)
    # what the tree's tests call the switches' needs (sources/pytest_slice.py) is in its test module
    tests = tree / ("hopper" if profile.family == "flash-attn-3" else "tests") / "test_flash_attn.py"
    if tests.is_file():
        text, names = tests.read_text(errors="replace"), profile.switches.tests
        params = [names.causal, names.decode, *(param for param, _ in names.params.values())]
        for param in filter(None, params):
            assert re.search(rf"parametrize\(\s*[\"'][\w, ]*\b{param}\b", text), (profile.name, param)
        for function in (f for group in names.functions.values() for f in group):
            assert f"def {function}(" in text, (profile.name, function)
        for variable in names.env.values():
            assert variable in text, (profile.name, variable)
    return profile.name


@pytest.mark.parametrize("version", sorted(FA2_SDISTS))
def test_each_fa2_release_narrows_exactly_its_trees_switches(version):
    tree = _real_fa2(version)
    before = tree_digest(tree)
    assert _check_overlay_against_tree(tree) == f"flash-attn-2@{FA2_SDISTS[version]}"
    assert tree_digest(tree) == before


def test_a_3_0_0b1_tree_with_the_stable_abi_api_is_refused_naming_it(tmp_path):
    """main's hopper/ from b3846b05 to e2743ab5^ still says 3.0.0.b1 but has flash_api_stable.cpp (and from 5c1627a7 a
    deterministic switch the 3.0.0b1 line does not narrow): no tag's layout, refused naming the file."""
    tree = layout_tree(tmp_path, "flash-attn-3@3.0.0b1", "3.0.0.b1")
    assert detect.detect(tree) == "flash-attn-3@3.0.0b1"
    (tree / "hopper" / "flash_api_stable.cpp").write_text("")
    with pytest.raises(SelectionError, match=r"nearest served release is flash-attn-3@3\.0\.0b1 .*has "
                                             r"hopper/flash_api_stable\.cpp \(a later layout\)"):
        detect.detect(tree)


@pytest.mark.parametrize("ref", ["b3846b05", "5c1627a7"])
def test_main_between_the_2_8_tags_and_3_0_0_is_refused(ref):
    tree, _ = fa3_tree_at(ref)
    with pytest.raises(SelectionError, match=r"says 3\.0\.0\.b1\) that no release of flash-attn-3 serves .*"
                                             r"has hopper/flash_api_stable\.cpp"):
        detect.detect(tree)


@pytest.mark.parametrize("ref", sorted(FA3_REFS))
def test_each_fa3_release_narrows_exactly_its_trees_switches(monkeypatch, ref):
    tree, cutlass = fa3_tree_at(ref)
    monkeypatch.setenv("FLASHBUILD_FA3_CUTLASS", str(cutlass))
    assert _check_overlay_against_tree(tree) == f"flash-attn-3@{FA3_REFS[ref]}"


# ---------------------------------------------------------------- one TU of each release line, real nvcc

def _math_headers_problem() -> str | None:
    """Releases whose kernels include ATen/cuda/CUDAContext.h (flash-attn 2.5, 2.6; FA3's flash_api.cpp)
    need the toolkit's cuSPARSE/cuBLAS/cuSOLVER headers, which a pip-installed nvcc lacks."""
    from flashbuild import env

    nvcc = env.find_nvcc()
    dirs = [Path(nvcc.path).resolve().parent.parent / "include"] if nvcc else []
    dirs += [Path(d) for d in os.environ.get("CPATH", "").split(os.pathsep) if d]
    wanted = ("cusparse.h", "cublas_v2.h", "cusolverDn.h")
    lacking = [h for h in wanted if not any((d / h).is_file() for d in dirs)]
    return (f"the CUDA toolkit here has no {', '.join(lacking)} (ATen/cuda/CUDAContext.h includes them): install "
            f"the toolkit's math libraries' headers or put their include dir on CPATH") if lacking else None


def _torch_include() -> Path:
    import torch.utils.cpp_extension as extension

    return Path(extension.include_paths()[0])


@pytest.mark.compile
@requires_nvcc
@pytest.mark.parametrize("version", ["2.5.0", "2.5.9.post1", "2.6.1", "2.6.3", "2.7.3", "2.7.4.post1", "2.8.0.post2"])
def test_one_tu_of_each_fa2_release_line_compiles_and_the_tree_is_untouched(tmp_path, version):
    """The 2.8 line's 2.8.3 is tests/test_fa2_tree.py's; hdim 32 fp16 forward, not causal (2.5: causal
    and not, one TU), with the stubs of the rest of what flash_api.cpp reaches."""
    tree = _real_fa2(version)
    launch = (tree / "csrc/flash_attn/src/flash_fwd_launch_template.h").read_text()
    if "ATen/cuda/CUDAContext.h" in launch and _math_headers_problem():
        pytest.skip(f"flash-attn {version}: {_math_headers_problem()}")
    before = tree_digest(tree)
    cache = tmp_path / "cache"
    args = ["--source", str(tree), "--hdim", "32", "--dtype", "fp16", "--arch", "sm80", "--direction", "fwd",
            "--causal", "off", "--features", "none", "--compile-only", "--jobs", "1"]
    process = subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True,
                             env={**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}, timeout=1800)
    assert process.returncode == 0, process.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    assert build_dir.name.startswith(f"flash-attn-2-{FA2_SDISTS[version]}-")
    objects = sorted(p.name for p in (build_dir / "obj").glob("*.o"))
    assert objects == ["flash_fwd_hdim32_fp16_sm80.o", "flashbuild_missing.o"]
    assert all((build_dir / "obj" / name).stat().st_size > 0 for name in objects)
    assert tree_digest(tree) == before


@pytest.mark.compile
@requires_nvcc
@pytest.mark.parametrize("ref", sorted(FA3_REFS))
def test_each_fa3_release_api_needs_exactly_the_slices_units_and_stubs(tmp_path, monkeypatch, ref):
    """FA3's kernel TUs are the same at both commits (and minutes each): what differs is the API
    (flash_api.cpp before the stable ABI, flash_api_stable.cpp after) and the CUTLASS. The stubs TU
    compiles against the release's flash.h and CUTLASS, and the API compiled with the build's flags
    leaves undefined exactly the slice's units, its stubs and the scheduler (tests/test_fa3_tree.py's
    check, per release)."""
    from flashbuild.pipeline import graph, toolchain
    from test_fa3_tree import _symbols, _unit_symbol

    tree, cutlass = fa3_tree_at(ref)
    if FA3_REFS[ref] == "3.0.0b1" and _math_headers_problem():
        pytest.skip(f"FA3 at {ref} (flash_api.cpp): {_math_headers_problem()}")
    before = tree_digest(tree / "hopper")
    monkeypatch.setenv("FLASHBUILD_FA3_CUTLASS", str(cutlass))
    selection, options = builder.parse_request(source=tree, hdim=64, dtype="fp16", arch="sm90", direction="fwd",
                                               features="none", compile_only=True, build_dir=tmp_path / "build")
    plan = builder.make_plan(selection, options)
    assert plan.profile.name == f"flash-attn-3@{FA3_REFS[ref]}"
    tools = builder.toolchain(plan)
    builder.prepare(plan)
    render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                        context=builder.tree_context(plan))
    (plan.build_dir / "obj").mkdir(exist_ok=True)
    render.write_if_different(plan.build_dir / "build.ninja", builder.ninja_text(plan, tools, None))
    link = toolchain.torch_link_spec(plan)
    # the stubs, and the torch ABI header the API's compile force-includes (from the build dir, as ninja runs it)
    stubs = subprocess.run(["ninja", "-C", str(plan.build_dir), "obj/flashbuild_missing.o"], capture_output=True,
                           text=True)
    assert stubs.returncode == 0, stubs.stdout[-3000:]
    if link.abi_probe:  # a --compile-only build.ninja has no probe edge: run it as that edge would
        probe = link.abi_probe
        subprocess.run([str(probe.python), str(probe.script), str(plan.build_dir / graph.TORCH_ABI_FILE),
                        str(probe.torch_root), str(probe.torch_version)], check=True)
    torch_cuda = _torch_include()
    if FA3_REFS[ref] == "3.0.0b1" and not (torch_cuda / "c10/cuda/impl/cuda_cmake_macros.h").is_file():
        pytest.skip(f"FA3 at {ref}: the stubs compiled against its flash.h and CUTLASS; its flash_api.cpp includes "
                    f"ATen/cuda/CUDAContextLight.h, which needs a CUDA build of torch (no "
                    f"c10/cuda/impl/cuda_cmake_macros.h under {torch_cuda})")
    api = tmp_path / "api.o"
    compiled = subprocess.run([str(link.cxx), *graph.binding_flags(link, tools, plan.gen_dir), "-c",
                               str(link.api_sources[0]), "-o", str(api)], capture_output=True, text=True,
                              cwd=plan.build_dir)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    needed = _symbols(api, "U")
    units = {_unit_symbol(u) for u in plan.units if u.source is None}
    stubbed = _symbols(plan.build_dir / "obj" / "flashbuild_missing.o", "TW")
    assert needed - units - stubbed - {"prepare_varlen_num_blocks"} == set()
    assert (units | stubbed) - needed == set() and len(stubbed) == len(plan.missing)
    assert tree_digest(tree / "hopper") == before


# ---------------------------------------------------------------- the adapters speak each release's Python API

FA2_25_INTERFACE = '''
flash_attn_cuda = "flash_attn_2_cuda"
calls = []
def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    calls.append(("flash_attn_func", causal, window_size))
    return "out", "lse", None
def _flash_attn_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal,
                         window_size, alibi_slopes, deterministic, rng_state=None):
    raise AssertionError("2.5's backward op takes the window as one tuple: the adapter goes through autograd")
def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), rotary_interleaved=True, alibi_slopes=None,
                            num_splits=0):
    return "out"
'''


def test_the_fa2_adapter_speaks_2_5s_api(tmp_path):
    """flash-attn 2.5: the extension is flash_attn_cuda, flash_attn_func takes no softcap, the cache call
    returns no LSE (signatures as in the 2.5.9.post1 sdist's flash_attn_interface.py)."""
    import types

    from flashbuild.debug import adapters

    interface = types.ModuleType("flash_attn.flash_attn_interface")
    exec(FA2_25_INTERFACE, interface.__dict__)
    package = types.ModuleType("flash_attn")
    package.flash_attn_interface = interface
    fa2 = adapters.wrap("flash-attn-2", package, {"key": "k", "selection": {"features": []}, "units": []})
    assert fa2.ext == "flash_attn_2_cuda"
    assert fa2.flash_attn_func("q", "k", "v", causal=True, return_lse=True, window_size_left=4) == ("out", "lse")
    assert interface.calls == [("flash_attn_func", True, (4, -1))]
    with pytest.raises(ValueError, match="no softcap"):
        fa2.flash_attn_func("q", "k", "v", softcap=30.0)
    with pytest.raises(ValueError, match="returns no LSE"):
        fa2.mha_fwd_kvcache("q", "kc", "vc", [3], causal=True, num_splits=3)


def test_the_fa3_adapter_speaks_3_0_0b1s_api(tmp_path, monkeypatch):
    """hopper/ of the 2.8 tags: torch.ops.flash_attn_3 is flash_attn_3_cuda, flash_attn_func returns out
    alone (the adapter reads out and LSE from _flash_attn_forward), the backward takes one window tuple."""
    import torch

    from flashbuild.debug import adapters

    (tmp_path / "flash_attn_interface.py").write_text(
        "import torch\nflash_attn_3_cuda = 'ops'\ncalls = []\n"
        "def _flash_attn_forward(q, k, v, k_new, v_new, qv, out, cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new,\n"
        "        seqused_q, seqused_k, max_seqlen_q, max_seqlen_k, page_table, kv_batch_idx, leftpad_k, rotary_cos,\n"
        "        rotary_sin, seqlens_rotary, q_descale, k_descale, v_descale, softmax_scale, causal,\n"
        "        window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,\n"
        "        scheduler_metadata=None, num_splits=1, pack_gqa=None, sm_margin=0):\n"
        "    calls.append(('fwd', softmax_scale, causal, window_size, softcap))\n"
        "    return 'out', torch.tensor([float('-inf')]), None, None\n"
        "def _flash_attn_backward(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, sequed_q, sequed_k,\n"
        "        max_seqlen_q, max_seqlen_k, dq, dk, dv, softmax_scale, causal, window_size=(-1, -1), softcap=0.0,\n"
        "        deterministic=False, sm_margin=0):\n"
        "    calls.append(('bwd', softmax_scale, causal, window_size, softcap))\n"
        "def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,\n"
        "        v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1, pack_gqa=None,\n"
        "        deterministic=False, sm_margin=0):\n"
        "    raise AssertionError('returns out alone: not called for out and LSE')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "flash_attn_interface", raising=False)
    fa3 = adapters.FlashAttn3Slice(type(sys)("flash_attn_3"), {"selection": {"hdim": [64]}, "units": []})
    assert fa3.ext == "ops"
    q = torch.zeros(1, 2, 1, 64)
    out, lse = fa3.flash_attn_func(q, q, q, causal=True, return_lse=True, softcap=5.0, window_size_left=8)
    assert out == "out" and lse.tolist() == [float("inf")]
    fa3.mha_bwd(q, q, q, q, q, lse, causal=True, window_size_left=8, window_size_right=0)
    calls = sys.modules["flash_attn_interface"].calls
    assert calls == [("fwd", 0.125, True, (8, -1), 5.0), ("bwd", 0.125, True, (8, 0), 0.0)]


@pytest.mark.parametrize("release, version, sizes", [
    ("2.5", "2.5.9.post1", (32, 64, 96, 128, 160, 192, 224, 256)), ("2.6", "2.6.3", (32, 64, 96, 128, 160, 192, 256)),
    ("2.7", "2.7.3", (32, 64, 96, 128, 160, 192, 256)), ("2.7.4", "2.7.4.post1", (32, 64, 96, 128, 160, 192, 256)),
    ("2.8", "2.8.3", (32, 64, 96, 128, 192, 256))])
def test_each_fa2_release_has_the_kernel_sizes_of_its_headdim_switch(tmp_path, release, version, sizes):
    """A head dim runs on the tree's next kernel size up, as its HEADDIM_SWITCH and flash_api.cpp's
    rounding decide (before 2.8, 129-160 on hdim 160): the narrowed switch must use the same sizes, or a
    call would reach a kernel whose head dim the API did not size its buffers for."""
    tree = layout_tree(tmp_path, f"flash-attn-2@{release}", version)
    assert profiles.load(f"flash-attn-2@{release}").hdims == sizes
    if 160 not in sizes:
        with pytest.raises(SelectionError, match="hdim-192 kernel"):
            builder.parse_request(source=tree, hdim=160, arch="sm90")
        return
    plan, texts = _texts(tree, hdim="160,192", direction="fwd", causal="off")
    assert [u.name for u in plan.units] == ["flash_fwd_hdim160_fp16_sm80", "flash_fwd_hdim192_fp16_sm80"]
    switch = texts["static_switch.h"]
    assert "(HEADDIM) > 128 && (HEADDIM) <= 160" in switch and "(HEADDIM) > 160 && (HEADDIM) <= 192" in switch


def test_a_release_whose_keys_break_the_profile_names_both_files(tmp_path):
    """A release's [profile] keys are checked as the profile's own are; the error names both files."""
    release = releases_module.Release("flash-attn-2", "9.9", tmp_path / "9.9.toml", "9.9", "9.10", "x", (), (),
                                      {"axes": {"hdim": [64, "big"]}, "features": {"mode": "sometimes"}})
    base = profiles.profiles_dir() / "flash-attn-2.toml"
    with pytest.raises(SelectionError) as error:
        profiles.read_profile(base, release)
    assert f"{base} with {tmp_path / '9.9.toml'}" in str(error.value) and "axes.hdim" in str(error.value)
