"""The compilers a build starts, and stopping every one of them.

ninja runs in a session of its own, so that flashbuild can signal its whole process group, and
ninja puts each compile in a process group of its own; on SIGTERM or SIGINT ninja signals every
such group (nvcc and the cicc/ptxas it started) and waits for them. So stopping a build is: signal
ninja, wait, and kill what is left. Three ways a build ends early are covered:

- an exception or Ctrl-C in flashbuild (KeyboardInterrupt): `running()` stops ninja on the way out;
- SIGTERM / SIGHUP to flashbuild: `signals_raise()` turns them into `Terminated`, which does the same;
- SIGKILL to flashbuild (nothing runs): ninja was started with PR_SET_PDEATHSIG, so the kernel sends it
  SIGTERM when flashbuild dies; and the next build of the same dir first stops any compiler still
  running there (`stop_leftovers`: processes whose working directory is the build dir and whose
  environment carries the mark `start` gives ninja, and so every compiler under it), so a rerun never
  races a leftover compiler on one object. A process the user started there (a shell that cd'd into
  the build dir, an editor) has no mark and is never signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

GRACE_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1
# Set in ninja's environment (the compilers inherit it) to the build dir it runs in: the leftover sweep
# signals only processes that carry it, never another program that merely works in that dir.
MARK = "FLASHBUILD_COMPILING_IN"


class Terminated(KeyboardInterrupt):
    """flashbuild got SIGTERM or SIGHUP: unwound like Ctrl-C, so every `finally` runs."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _child_setup() -> None:  # runs in the child between fork and exec
    os.umask(0o077)  # objects, logs and the extension are the user's alone
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the leftover sweep still covers a killed parent
        pass


def start(command: list[str], **kwargs) -> subprocess.Popen:
    """Start `command` (ninja) in a new session, under umask 077, dying with its parent, marked (MARK)
    with the dir it runs in."""
    directory = os.path.realpath(kwargs.get("cwd") or os.getcwd())
    kwargs["env"] = {**(kwargs.get("env") or os.environ), MARK: directory}
    return subprocess.Popen(command, start_new_session=True, preexec_fn=_child_setup, **kwargs)


def stop(process: subprocess.Popen, grace: float = GRACE_SECONDS) -> None:
    """SIGTERM the process's group (ninja passes it on to each compile's group and waits for them),
    then SIGKILL whatever is left after `grace` seconds."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


# Signals signals_raise's handlers took. Python runs a handler at the next bytecode of the main thread,
# which can be inside code whose exceptions it only prints ("Exception ignored in ..."): an at-fork
# callback while subprocess forks ninja (logging's _releaseLock), a __del__, a weakref callback. There
# the Terminated (or Ctrl-C's KeyboardInterrupt) is lost and the build would go on; raise_pending()
# raises it again where the normal flow passes only if it was lost. While signals_raise() is in force,
# Python's report of such a lost exception (a traceback on stderr) is dropped: the signal is not lost,
# only deferred.
_pending: list[int] = []


def _interrupt(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def raise_pending() -> None:
    """Raise the exception of a signal whose handler's exception Python swallowed (see _pending)."""
    if _pending:
        signum = _pending[-1]
        _pending.clear()
        raise _interrupt(signum)


@contextlib.contextmanager
def running(command: list[str], **kwargs) -> Iterator[subprocess.Popen]:
    """`start` the command; however the block is left, the process and its compilers are gone."""
    process = start(command, **kwargs)
    try:
        raise_pending()  # a signal during the fork: its Terminated went to an at-fork callback
        yield process
    finally:
        stop(process)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def output_lines(process: subprocess.Popen, poll: float = 0.2) -> Iterator[str]:
    """The process's stdout a line at a time, read by a thread of its own, while the main thread wakes every
    `poll` seconds. The kernel gives a process-directed signal to any thread that does not block it: when
    another thread (one an imported library started) takes SIGTERM / SIGHUP, Python's handler runs only at
    the main thread's next bytecode, and a main thread blocked reading a quiet ninja (no line until a
    compile ends, minutes at a time) would not get there until it does. Waking every `poll` seconds, the
    handler's Terminated comes within `poll` (and raise_pending catches one it lost)."""
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        try:
            for line in process.stdout:
                lines.put(line)
        except (OSError, ValueError):  # the stream closed under the thread as the build stopped
            pass
        finally:
            lines.put(None)

    threading.Thread(target=pump, name="ninja-output", daemon=True).start()
    while True:
        raise_pending()
        try:
            line = lines.get(timeout=poll)
        except queue.Empty:
            continue
        if line is None:
            return
        yield line


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """While the block runs (main thread only), SIGTERM and SIGHUP raise Terminated, and SIGINT (where it is
    not ignored, as in a background job) KeyboardInterrupt as Python's own handler does; each is recorded in
    _pending too, for where Python swallows it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        _pending.append(signum)  # in case the exception below lands where Python swallows it
        raise _interrupt(signum)

    report = sys.unraisablehook

    def unraisable(info) -> None:
        if not (isinstance(info.exc_value, KeyboardInterrupt) and _pending):  # recorded: deferred, not an error
            report(info)

    handled = [signal.SIGTERM, signal.SIGHUP]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        handled.append(signal.SIGINT)
    _pending.clear()
    previous = {sig: signal.signal(sig, handler) for sig in handled}
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        sys.unraisablehook = report
        for sig, old in previous.items():
            signal.signal(sig, old)
        _pending.clear()


def _marked(pid: int, target: str) -> bool:
    """Whether process `pid` carries MARK for `target` (a ninja that `start` began there, or a compiler under it)."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{MARK}={target}".encode() in f.read(1 << 20).split(b"\0")
    return False


def processes_in(directory: Path) -> list[int]:
    """PIDs (other than ours) working in `directory` that an earlier build's ninja started there (they
    carry MARK): its compilers. Another program working in that dir is not one of them."""
    target = os.path.realpath(directory)
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/cwd") == target and _marked(int(entry.name), target):
                    found.append(int(entry.name))
    return found


def stop_leftovers(directory: Path, log=lambda message: None, grace: float = GRACE_SECONDS) -> list[int]:
    """Stop every process still working in `directory` (TERM its group, then KILL after `grace`
    seconds); returns their PIDs. Call with the build lock held."""
    pids = processes_in(directory)
    if not pids:
        return []
    log(f"stopping {len(pids)} compiler process{'es' if len(pids) > 1 else ''} left running in {directory} "
        f"by an earlier build (pids {', '.join(map(str, pids))})")
    groups = set()
    target = os.path.realpath(directory)
    for pid in pids:
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group == pid or _marked(group, target):  # a group a marked process leads: a compile's own
                groups.add(group)
    own = os.getpgrp()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        for group in groups - {own}:
            with contextlib.suppress(OSError):
                os.killpg(group, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.05)
        if not any(_alive(pid) for pid in pids):
            break
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (OSError, IndexError):
        return False
