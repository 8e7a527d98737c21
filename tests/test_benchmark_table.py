"""benchmarks/README.md's current-numbers table is what benchmarks/current.py makes of the committed runs
it names (no GPU): a run replaced, or a table edited by hand, fails here until regenerated."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_the_current_numbers_table_is_generated_from_the_runs():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "current.py"), "--check"], capture_output=True,
                          text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr


def test_the_table_names_each_run_and_has_a_row_per_head_dim_and_causal_value():
    table = subprocess.run([sys.executable, str(REPO / "benchmarks" / "current.py")], capture_output=True, text=True,
                           check=True).stdout
    rows = [line for line in table.splitlines() if line.startswith("| fwd") or line.startswith("| bwd")]
    assert len(rows) == 6 * 2 + 5 * 2  # forward: head dims 32-256; backward: 64-256; causal or not
    assert "n/a" not in table
