"""loader: an extension rebuilt after this process loaded it is refused, never served stale
(issue 17). No compiler: the memo is seeded as a load would have left it."""

from __future__ import annotations

import os
import types

import pytest

from flashbuild.build import loader


@pytest.fixture
def loaded(tmp_path, monkeypatch):
    path = (tmp_path / "_flashbuild_abc.so").resolve()
    path.write_bytes(b"first build")
    module = types.ModuleType("_flashbuild_abc")
    monkeypatch.setattr(loader, "_loaded", {path: (loader.fingerprint(path), module)})
    return path, module


def test_an_unchanged_extension_is_the_module_already_loaded(loaded):
    path, module = loaded
    assert loader.load_extension(path, "_flashbuild_abc") is module


def test_a_relinked_extension_is_refused_not_served_stale(loaded):
    path, _ = loaded
    new = path.with_suffix(".so.tmp")
    new.write_bytes(b"second build, longer")
    os.replace(new, path)  # as the link edge does: mv -f $out.tmp $out
    with pytest.raises(ImportError, match="was rebuilt after this process loaded it .* new process"):
        loader.load_extension(path, "_flashbuild_abc")
