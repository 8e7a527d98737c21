"""The test tiers stay true: every entry of tests/slow_tests.txt names a test function that exists (a
renamed test would otherwise slip into the fast tier unnoticed), and the markers the tiers use are declared."""

from __future__ import annotations

import re

from helpers import REPO, slow_tests


def test_every_listed_slow_test_exists():
    missing = []
    for entry in sorted(slow_tests()):
        file, function = entry.split("::")
        path = REPO / file
        if not path.is_file() or not re.search(rf"^\s*def {re.escape(function)}\(", path.read_text(), re.M):
            missing.append(entry)
    assert not missing, f"tests/slow_tests.txt lists tests that do not exist: {missing}"


def test_the_tier_markers_are_declared():
    text = (REPO / "pyproject.toml").read_text()
    for marker in ("compile", "slow", "gpu"):
        assert re.search(rf'^\s*"{marker}: ', text, re.M), f"marker {marker} is not declared in pyproject.toml"
