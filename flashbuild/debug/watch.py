"""`flashbuild watch`: on a saved kernel file, rebuild the slice and rerun `test --shapes quick`.

Polls the modification times under kernels/ (no new dependency). Each cycle runs the test in a new
process: a rebuilt extension cannot be loaded twice into one process.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Callable

WATCHED_SUFFIXES = {".h", ".hpp", ".cuh", ".cu", ".cpp", ".inl"}


def snapshot(root: Path) -> dict[str, int]:
    """relative path -> mtime (ns) of every source file under root."""
    files = {}
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        if path.suffix in WATCHED_SUFFIXES and path.is_file():
            try:
                files[str(path.relative_to(root))] = path.stat().st_mtime_ns
            except OSError:  # removed while we looked
                continue
    return files


def changes(old: dict[str, int], new: dict[str, int]) -> list[str]:
    """Files added, removed or modified between two snapshots."""
    return sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))


def watch(root: Path, command: list[str], *, interval: float = 1.0, log: Callable[[str], None],
          run: Callable[[list[str]], int] = lambda cmd: subprocess.run(cmd, check=False).returncode,
          sleep: Callable[[float], None] = time.sleep, max_cycles: int | None = None) -> int:
    """Run `command` now and after every change under root; returns the number of runs (for tests:
    max_cycles bounds the polls)."""
    runs = 0
    log(f"watching {root} (every {interval:g}s; Ctrl-C stops)")
    before = snapshot(root)
    code = run(command)
    runs += 1
    log(f"{'passed' if code == 0 else f'exit {code}'}; waiting for a change under {root}")
    polls = 0
    while max_cycles is None or polls < max_cycles:
        sleep(interval)
        polls += 1
        now = snapshot(root)
        changed = changes(before, now)
        if not changed:
            continue
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        log(f"changed: {shown}: rebuilding and testing")
        before = now  # an edit saved while this run goes on starts the next one
        code = run(command)
        runs += 1
        log(f"{'passed' if code == 0 else f'exit {code}'}; waiting for a change under {root}")
    return runs
