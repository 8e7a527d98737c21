"""Fuzz the pytest plugin's environment (issue 48): FLASHBUILD_SLICE (its manifest's content, or a
path to a dir, a FIFO, nothing), FLASHBUILD_SLICE_HDIMS and FLASHBUILD_SLICE_SHARD, and the case
parameters a test module gives. The property: the plugin selects cases, or stops with a
pytest.UsageError naming the variable; never another exception (pytest's INTERNALERROR), never a hang."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from fuzzing import JSON, examples, file_content, sandbox, timebox, values

MANIFEST = {"key": "k", "profile": "flashbuild", "source": None,
            "selection": {"hdim": [64], "dtype": ["fp16"], "features": ["local"]}}
WHERE = st.sampled_from(["file", "file", "file", "dir", "fifo", "missing", "unset"])


@settings(max_examples=examples(60))
@given(file_content(MANIFEST), WHERE, values("64", "40,59", "128"), values("0/2", "1/2", "3/4"),
       st.dictionaries(st.sampled_from(["dtype", "head_dim", "window", "softcap", "d"]), JSON, max_size=4))
def test_the_plugin_selects_or_stops_with_a_usage_error(content, where, hdims, shard, params):
    from flashbuild.sources import pytest_slice

    with sandbox() as box:
        path = box.cwd / "m.json"
        if where == "file":
            path.write_bytes(content)
        elif where == "dir":
            path.mkdir()
        elif where == "fifo":
            os.mkfifo(path)
        environ = {"FLASHBUILD_SLICE": None if where == "unset" else str(path),
                   "FLASHBUILD_SLICE_HDIMS": hdims, "FLASHBUILD_SLICE_SHARD": shard}
        box.env.update(environ)
        with box.environment(), timebox(20, "the plugin"):
            try:
                pytest_slice.shard_of(os.environ.get("FLASHBUILD_SLICE_SHARD"))
                pytest_slice.only_hdims(os.environ.get("FLASHBUILD_SLICE_HDIMS"))
                manifest, tree = pytest_slice._slice()
                pytest_slice.serves(params, manifest, tree)
                pytest_slice.test_environment(manifest, tree)
            except pytest.UsageError as exc:
                message = str(exc)
                assert "FLASHBUILD_SLICE" in message, message
                assert "\n" not in message.strip(), message
