"""`flashbuild test --sanitize`: run the checks again under compute-sanitizer (memcheck) and fail
each check whose kernel it reported.

The parent process builds, then runs `python -m flashbuild test ...` under the sanitizer with
FLASHBUILD_CHECK_MARKERS=1: the child prints a marker line before each check and synchronizes after
it, so every report on the shared output stream belongs to the last marker before it. The child
writes its rows as JSON; the parent adds the sanitizer's findings to them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable

from .. import env
from .checking import MARKER, REASON_OOB, Row
from ..errors import BuildError

MARKERS_ENV = "FLASHBUILD_CHECK_MARKERS"
# memcheck's hazard lines: "Invalid __global__ read of size 4 bytes", "Out-of-range Shared or
# Local Address", "Misaligned Shared or Local Address", "Malformed ..."
HAZARD = re.compile(r"^=+\s+((?:Invalid|Out-of-range|Misaligned|Malformed)\b.*)$")
API_ERROR = re.compile(r"^=+\s+(Program hit .*)$")
SUMMARY = re.compile(r"^=+\s+(ERROR SUMMARY: .*?)\s*$")


def find_sanitizer() -> Path:
    found = env.find_cuda_tool("compute-sanitizer")
    if found is None:
        raise BuildError("--sanitize needs compute-sanitizer (not next to nvcc, in $CUDA_HOME/bin, on PATH or in "
                         "/usr/local/cuda/bin): install the CUDA toolkit's compute-sanitizer or `pip install "
                         f"{env.CUDA_TOOL_WHEELS['compute-sanitizer']}`, or run without --sanitize")
    return found.path


def marker_line(variant: str, shape: str) -> str:
    return f"{MARKER}\t{variant}\t{shape}"


def attribute(lines: Iterable[str], on_check: Callable[[str, str], None] = lambda v, s: None) -> dict[tuple[str, str], str]:
    """(variant, shape) -> the first sanitizer report after that check's marker."""
    found: dict[tuple[str, str], str] = {}
    current: tuple[str, str] | None = None
    for line in lines:
        line = line.rstrip("\n")
        if line.startswith(MARKER + "\t"):
            _, variant, shape = line.split("\t", 2)
            current = (variant, shape)
            on_check(variant, shape)
            continue
        match = HAZARD.match(line) or API_ERROR.match(line)
        if match and current is not None and current not in found:
            found[current] = match.group(1).strip()
    return found


def apply(rows: list[Row], reports: dict[tuple[str, str], str]) -> list[Row]:
    """Fail each row the sanitizer reported: "out-of-bounds: <its first report line>"."""
    for row in rows:
        report = reports.get((row.variant, row.shape))
        if report is not None and row.skipped is None:
            kind = REASON_OOB if HAZARD.match(f"= {report}") else "CUDA error under compute-sanitizer"
            row.error = f"{kind}: {report}"
    return rows


def run_child(test_args: list[str], json_path: Path, log: Callable[[str], None]) -> tuple[int, dict, list[str]]:
    """Run `flashbuild test TEST_ARGS --json JSON_PATH` under memcheck; returns its exit code,
    the reports by check, and the output's last lines (for a child that died)."""
    sanitizer = find_sanitizer()
    command = [str(sanitizer), "--tool", "memcheck", "--print-limit", "20", sys.executable, "-m", "flashbuild",
               "test", *test_args, "--json", str(json_path)]
    log(f"running the checks under {sanitizer.name} (memcheck is slow: minutes)")
    tail: list[str] = []

    def lines(stream):
        for line in stream:
            tail.append(line.rstrip("\n"))
            del tail[:-40]
            if SUMMARY.match(line):  # proof that memcheck ran, and its count
                log(f"compute-sanitizer: {SUMMARY.match(line).group(1)}")
            yield line

    # Without PyTorch's caching allocator each tensor is its own allocation, so memcheck sees an access
    # just past an output (inside a cached block it would go unseen). The child's outputs are then not
    # NaN-poisoned (checking.poison fills cached blocks): the plain `flashbuild test` run checks that.
    child_env = {**os.environ, MARKERS_ENV: "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                          env=child_env) as process:
        reports = attribute(lines(process.stdout), on_check=lambda v, s: log(f"  sanitizing {v} {s}"))
        code = process.wait()
    return code, reports, tail
