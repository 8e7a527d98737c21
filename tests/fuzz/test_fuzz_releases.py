"""The files and values issues 44 and 49 added to what flashbuild parses: the sdists' digest table
(configs/sources/sdists.toml), a --source NAME==VERSION spec, and a profile's release-line files
(configs/profiles/releases/<profile>/<release>.toml, applied to the base profile). The property: a
checked result or a SelectionError naming the file or the value; never another exception, never a hang."""

from __future__ import annotations

import tomllib
from pathlib import Path

from hypothesis import given, settings, strategies as st

from flashbuild.errors import SelectionError
from flashbuild.sources import profile as profiles, release, releases
from fuzzing import TOML_VALUES, examples, mutated, timebox, toml_dump
from helpers import REPO

SDISTS = REPO / "configs" / "sources" / "sdists.toml"
LINE = REPO / "configs" / "profiles" / "releases" / "flash-attn-2" / "2.6.toml"
FA3_LINE = REPO / "configs" / "profiles" / "releases" / "flash-attn-3" / "3.0.0.toml"  # has tests.known_failures


def _write(tmp: Path, name: str, data) -> Path:
    path = tmp / name
    path.write_bytes(data if isinstance(data, bytes) else toml_dump(data).encode("utf-8", "surrogatepass"))
    return path


@settings(max_examples=examples(40), deadline=None)
@given(mutated(tomllib.loads(SDISTS.read_text()), TOML_VALUES) | st.binary(max_size=60))
def test_the_digest_table_is_read_or_refused(tmp_path_factory, data):
    path = _write(tmp_path_factory.mktemp("sdists"), "sdists.toml", data)
    with timebox(10, "read_table"):
        try:
            table = release.read_table(path)
        except SelectionError as error:
            assert str(path) in str(error) and "\n" not in str(error)
        else:
            assert all(isinstance(r, release.Release) for r in table.values())


@settings(max_examples=examples(60), deadline=None)
@given(st.text(max_size=60) | st.from_regex(r"[a-zA-Z_-]{1,12}==[0-9a-z.+-]{0,12}", fullmatch=True))
def test_a_release_spec_resolves_or_is_refused_by_name(spec):
    with timebox(10, "resolve"):
        try:
            found = release.resolve(spec, SDISTS)
        except SelectionError as error:
            assert "\n" not in str(error)
        else:  # only what the table holds, with its digest
            assert len(found.sha256) == 64


@settings(max_examples=examples(40), deadline=None)
@given(mutated(tomllib.loads(LINE.read_text()), TOML_VALUES) | st.binary(max_size=60))
def test_a_release_line_file_is_read_and_applied_or_refused(tmp_path_factory, data):
    path = _write(tmp_path_factory.mktemp("line"), "2.6.toml", data)
    with timebox(20, "read_release"):
        try:
            line = releases.read_release(path, "flash-attn-2")
            profiles.read_profile(profiles.profiles_dir() / "flash-attn-2.toml", line)
        except SelectionError as error:
            assert "\n" not in str(error)


EXTENDING = REPO / "configs" / "profiles" / "releases" / "flash-attn-2" / "2.6.0.toml"  # extends, causal_runtime


@settings(max_examples=examples(40), deadline=None)
@given(mutated(tomllib.loads(EXTENDING.read_text()), TOML_VALUES) | st.binary(max_size=60))
def test_a_release_line_that_extends_another_is_resolved_and_applied_or_refused(tmp_path_factory, data):
    """A line with release.extends and axes.causal_runtime, beside the line it extends: releases() resolves the
    extension (or refuses it naming the file), and the profile with both applied reads or is refused."""
    folder = tmp_path_factory.mktemp("lines")
    lines = folder / "releases" / "flash-attn-2"
    lines.mkdir(parents=True)
    (lines / "2.5.toml").write_text((LINE.parent / "2.5.toml").read_text())
    _write(lines, "2.6.0.toml", data)
    with timebox(20, "releases"):
        try:
            found = {r.name: r for r in releases.releases(folder, "flash-attn-2")}
            profiles.read_profile(profiles.profiles_dir() / "flash-attn-2.toml", found["2.6.0"])
        except SelectionError as error:
            assert "\n" not in str(error)


@settings(max_examples=examples(40), deadline=None)
@given(mutated(tomllib.loads(FA3_LINE.read_text()), TOML_VALUES) | st.binary(max_size=60))
def test_an_fa3_release_line_with_known_failures_is_read_and_applied_or_refused(tmp_path_factory, data):
    path = _write(tmp_path_factory.mktemp("line"), "3.0.0.toml", data)
    with timebox(20, "read_release"):
        try:
            line = releases.read_release(path, "flash-attn-3")
            found = profiles.read_profile(profiles.profiles_dir() / "flash-attn-3.toml", line)
        except SelectionError as error:
            assert "\n" not in str(error)
        else:
            assert all(isinstance(k, str) and isinstance(v, str) and "\n" not in v
                       for k, v in found.tests.known_failures.items())
