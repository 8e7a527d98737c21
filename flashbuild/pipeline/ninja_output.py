"""Reading ninja back: its output (progress lines, failed edges, the first compiler error of each)
and its .ninja_log (how long each edge took). Pure text processing, so tests feed it samples.

ninja runs with NINJA_STATUS="@@flashbuild %f/%t %e@@ ", so when output is not a terminal each
finished edge prints `@@flashbuild 3/8 41.2@@ <description>`, then for a failed edge
`FAILED: [code=1] <outputs>`, the command, and the compiler's output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..selection.variants import Variant
from .graph import TORCH_ABI_FILE

STATUS = re.compile(r"^@@flashbuild (\d+)/(\d+) ([\d.]+)@@ (.*)$")
FAILED = re.compile(r"^FAILED: (?:\[code=\d+\] )?(.*?)\s*$")
# nvcc/EDG style `path(123): error: text`, gcc/clang style `path:123:4: error: text`
NVCC_ERROR = re.compile(r"^(?P<file>\S[^()]*?)\((?P<line>\d+)\): (?:catastrophic )?error\b[^:]*: (?P<text>.*)$")
GCC_ERROR = re.compile(r"^(?P<file>\S[^:]*?):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<text>.*)$")


def first_error(lines: Iterable[str]) -> str | None:
    """'file:line: error: text' for the first compiler error with a location, else the first line
    mentioning an error, else None."""
    fallback = None
    for line in lines:
        match = NVCC_ERROR.match(line) or GCC_ERROR.match(line)
        if match:
            return f"{match['file']}:{match['line']}: error: {match['text'].strip()}"
        if fallback is None and re.search(r"\berror\b", line, re.IGNORECASE):
            fallback = line.strip()
    return fallback


@dataclass
class Failure:
    target: str           # variant name, "binding" or "link"
    output: str           # the ninja output path that failed
    lines: list[str] = field(default_factory=list)  # compiler output (the command excluded)

    @property
    def error(self) -> str:
        return first_error(self.lines) or (self.lines[-1].strip() if self.lines else "(no compiler output)")


class NinjaOutput:
    """Consumes ninja's output line by line: reports progress and failures as they happen and
    keeps every failure for the summary."""

    def __init__(self, variants: Iterable[Variant] = (), on_message: Callable[[str], None] = lambda m: None,
                 echo: Callable[[str], None] | None = None):
        self.variants = {v.name: v for v in variants}
        self.on_message = on_message
        self.echo = echo            # verbose: every line that is not a status line
        self.failures: list[Failure] = []
        self.errors: list[str] = []  # "ninja: error: ..." lines (e.g. a missing source)
        self.finished = 0
        self.total = 0
        self.returncode: int | None = None
        self.wall_seconds = 0.0
        self._current: Failure | None = None
        self._expect_command = False
        self._reported = False

    @staticmethod
    def target_name(output: str) -> str:
        """obj/<variant>.o -> the variant name; obj/flash_api.o -> binding; the .so -> link."""
        path = Path(output)
        if path.name == "flash_api.o":
            return "binding"
        if path.suffix == ".so":
            return "link"
        if path.name == TORCH_ABI_FILE:  # the ABI probe's output
            return "torch-abi"
        return path.stem if path.suffix == ".o" else output

    def describe(self, target: str) -> str:
        variant = self.variants.get(target)
        return f"{target} ({variant.describe()})" if variant else target

    def _close_failure(self) -> None:
        if self._current is not None and not self._reported:
            self.on_message(f"  FAILED {self.describe(self._current.target)}: {self._current.error}")
        self._current = None

    def feed(self, line: str) -> None:
        status = STATUS.match(line)
        if status:
            self._close_failure()
            self.finished, self.total = int(status[1]), int(status[2])
            self.on_message(f"[{self.finished}/{self.total}] {status[4]} (elapsed {float(status[3]):.1f}s)")
            return
        failed = FAILED.match(line)
        if failed:
            self._close_failure()
            output = failed[1].split()[0] if failed[1] else "?"
            self._current = Failure(self.target_name(output), output)
            self.failures.append(self._current)
            self._expect_command, self._reported = True, False
            return
        if line.startswith("ninja: "):
            self._close_failure()
            if line.startswith("ninja: error:"):
                self.errors.append(line)
                self.on_message(line)
            elif self.echo:
                self.echo(line)
            return
        if self.echo:
            self.echo(line)
        if self._current is not None:
            if self._expect_command:  # the line after FAILED: is the command
                self._expect_command = False
                return
            self._current.lines.append(line)
            if not self._reported and (NVCC_ERROR.match(line) or GCC_ERROR.match(line)):
                self.on_message(f"  FAILED {self.describe(self._current.target)}: {self._current.error}")
                self._reported = True

    def finish(self, returncode: int) -> None:
        self._close_failure()
        self.returncode = returncode

    @property
    def failed(self) -> bool:
        return bool(self.failures or self.errors or (self.returncode not in (0, None)))

    def summary(self, log_path: Path, command: str) -> str:
        """The one-line BuildError message: every failed target with its first error."""
        if self.failures:
            parts = "; ".join(f"{self.describe(f.target)}: {f.error}" for f in self.failures)
            what = f"{len(self.failures)} target{'s' if len(self.failures) > 1 else ''} failed: {parts}"
        elif self.errors:
            what = "; ".join(self.errors)
        else:
            what = f"ninja exited with {self.returncode}"
        return f"build failed: {what}; full log: {log_path}; fix it and rerun `{command}` (add --verbose for commands)"


# ---------------------------------------------------------------- .ninja_log

def read_ninja_log(path: Path) -> set[str]:
    """The entry lines of a .ninja_log (empty when there is none)."""
    try:
        return {line for line in path.read_text(errors="replace").splitlines() if line and not line.startswith("#")}
    except OSError:  # none, or not a file: ninja says what it makes of it
        return set()


def new_log_entries(before: set[str], path: Path) -> dict[str, float]:
    """Output path -> seconds, for the entries added since `before` was read. Entries are compared
    whole (start, end, mtime, output, hash) rather than by file offset, because ninja may rewrite
    (recompact) the log at the start of a run."""
    timings = {}
    for line in sorted(read_ninja_log(path) - before):
        fields = line.split("\t")
        if len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
            timings[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000.0
    return timings
