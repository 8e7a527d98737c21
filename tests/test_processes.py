"""No compiler outlives the build that started it: SIGTERM and SIGINT at several points, kill -9, and a
rerun that finds a leftover compiler in its build dir. Runs real ninja over a stand-in nvcc that
sleeps in a child process (as nvcc runs cicc), so no CUDA toolkit is needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashbuild.pipeline import processes
from helpers import make_fake_cuda

SLICE = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--no-local", "--no-softcap",
         "--compile-only", "--jobs", "2"]
pytestmark = pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="needs Linux /proc")


@pytest.fixture
def fake_env(tmp_path, fake_root) -> dict:
    home = make_fake_cuda(tmp_path)
    return {**os.environ, "CUDA_HOME": str(home), "FLASHBUILD_ROOT": str(fake_root),
            "FLASHBUILD_CACHE_DIR": str(tmp_path / "cache"), "FAKE_NVCC_SLEEP": "60",
            "FAKE_NVCC_PIDS": str(tmp_path / "pids"), "PYTHONUNBUFFERED": "1"}


def _default_sigint() -> None:  # runs in the child between fork and exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_build(environ: dict) -> subprocess.Popen:
    """flashbuild as a user's terminal starts it: SIGINT at its default. A test run started as a background job of
    a non-interactive shell inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored (as a background
    build should), so without the reset the SIGINT case would test the launcher, not flashbuild."""
    return subprocess.Popen([sys.executable, "-m", "flashbuild", *SLICE], env=environ, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)


def compiler_pids(environ: dict, count: int, timeout: float = 30) -> list[int]:
    """The pids of `count` running stand-in compilers (nvcc and its child each), once they run."""
    pidfile = Path(environ["FAKE_NVCC_PIDS"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pidfile.is_file() and len(pidfile.read_text().splitlines()) >= count:
            return [int(p) for line in pidfile.read_text().splitlines() for p in line.split()]
        time.sleep(0.05)
    raise AssertionError(f"the stand-in compilers did not start within {timeout}s")


def alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if processes._alive(pid)]


def wait_gone(pids: list[int], seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(pids)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_while_compiling_stops_every_compiler_within_5s(fake_env, signum):
    build = start_build(fake_env)
    pids = compiler_pids(fake_env, 2)
    build.send_signal(signum)
    _, stderr = build.communicate(timeout=90)
    assert wait_gone(pids) == [], f"left running after {signal.Signals(signum).name}"
    assert build.returncode == 128 + signum
    assert "Traceback" not in stderr
    assert f"interrupted ({signal.Signals(signum).name})" in stderr


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_a_signal_before_or_while_ninja_starts_leaves_nothing(fake_env, delay, tmp_path):
    """Early in the run (planning, rendering, ninja starting): exit cleanly, no compiler behind."""
    build = start_build(fake_env)
    time.sleep(delay)
    build.send_signal(signal.SIGTERM)
    _, stderr = build.communicate(timeout=90)
    time.sleep(0.5)
    pidfile = Path(fake_env["FAKE_NVCC_PIDS"])
    pids = [int(p) for p in pidfile.read_text().split()] if pidfile.is_file() else []
    assert wait_gone(pids) == []
    assert "Traceback" not in stderr


def test_kill_9_of_flashbuild_takes_ninja_and_its_compilers_with_it(fake_env):
    """Nothing of flashbuild runs on SIGKILL: ninja dies with its parent (PR_SET_PDEATHSIG) and
    stops its compilers on the way."""
    build = start_build(fake_env)
    pids = compiler_pids(fake_env, 2)
    build.kill()
    build.communicate(timeout=90)
    assert wait_gone(pids) == []


def test_a_rerun_stops_a_compiler_left_in_its_build_dir_before_building(fake_env, tmp_path):
    """Whatever escaped (here a process started by hand in the build dir), the next build of that dir
    stops it before it compiles, so two compilers never write one object."""
    first = subprocess.run([sys.executable, "-m", "flashbuild", *SLICE], env={**fake_env, "FAKE_NVCC_SLEEP": ""},
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    build_dir = next(p for p in (tmp_path / "cache").iterdir() if p.is_dir())
    # as a killed build's compiler: started in the build dir with the mark ninja's environment carries
    leftover = subprocess.Popen(["sleep", "60"], cwd=build_dir, start_new_session=True,
                                env={**os.environ, processes.MARK: os.path.realpath(build_dir)})
    (build_dir / "obj" / "fwd_hdim64_fp16_sm90.o").unlink()  # so the rerun has work to do
    rerun = subprocess.run([sys.executable, "-m", "flashbuild", *SLICE], env={**fake_env, "FAKE_NVCC_SLEEP": ""},
                           capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert leftover.wait(timeout=10) is not None
    assert f"left running in {build_dir}" in rerun.stderr


def test_processes_in_finds_only_processes_working_in_that_dir(tmp_path):
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    marked = {**os.environ, processes.MARK: os.path.realpath(inside)}
    a = subprocess.Popen(["sleep", "30"], cwd=inside, env=marked)
    b = subprocess.Popen(["sleep", "30"], cwd=outside, env={**os.environ, processes.MARK: os.path.realpath(outside)})
    try:
        assert processes.processes_in(inside) == [a.pid]
        assert processes.stop_leftovers(inside, grace=2) == [a.pid]
        assert a.wait(timeout=5) is not None and b.poll() is None
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_a_users_own_process_in_the_build_dir_is_never_signalled(tmp_path):
    """A shell that cd'd into a build dir (no mark: flashbuild did not start it), and its whole
    process group, survive the leftover sweep of the next build there."""
    build_dir = tmp_path / "key"
    build_dir.mkdir()
    shell = subprocess.Popen(["sleep", "30"], cwd=build_dir, start_new_session=True,
                             env={k: v for k, v in os.environ.items() if k != processes.MARK})
    try:
        assert processes.processes_in(build_dir) == []
        assert processes.stop_leftovers(build_dir, grace=1) == []
        assert shell.poll() is None
    finally:
        shell.kill()
        shell.wait()


def test_start_marks_ninja_and_what_it_starts_with_its_dir(tmp_path):
    with processes.running(["sh", "-c", "sleep 30"], cwd=tmp_path) as process:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and process.pid not in processes.processes_in(tmp_path):
            time.sleep(0.05)
        assert process.pid in processes.processes_in(tmp_path)


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # nothing may be reported
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_whose_exception_python_swallowed_still_stops_the_build(capfd, signum):
    """A SIGTERM or Ctrl-C handled where Python only prints 'Exception ignored in ...' (seen in CI: during the fork
    of ninja, in logging's at-fork _releaseLock; here a __del__) loses its exception; the next step of the
    build raises it again, the process it started is stopped, and no traceback reaches stderr."""
    class Swallows:
        def __del__(self):
            os.kill(os.getpid(), signum)
            for _ in range(1000):  # the handler runs at a bytecode boundary inside this method
                pass

    started = []
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts flashbuild
    try:
        with pytest.raises(processes.Terminated if signum == signal.SIGTERM else KeyboardInterrupt) as raised:
            with processes.signals_raise():
                Swallows()
                with processes.running(["sleep", "30"]) as process:
                    started.append(process)
                    pytest.fail("the swallowed signal did not stop the block")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert getattr(raised.value, "signum", signal.SIGINT) == signum
    assert started == [] or started[0].poll() is not None
    assert processes._pending == []
    assert "Traceback" not in capfd.readouterr().err


def test_other_unraisable_exceptions_are_still_reported():
    """signals_raise silences only the report of a lost Terminated; any other exception Python swallows is
    reported as before."""
    import gc

    seen = []

    class Fails:
        def __del__(self):
            raise ValueError("from __del__")

    report = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with processes.signals_raise():
            Fails()
            gc.collect()
    finally:
        sys.unraisablehook = report
    assert [type(info.exc_value) for info in seen] == [ValueError]


def test_a_signal_another_thread_takes_stops_a_quiet_build_within_a_second():
    """The kernel may give SIGTERM to any thread that does not block it; Python runs the handler only at the main
    thread's next bytecode. A main thread blocked reading a quiet ninja (nothing until a compile ends) must still
    raise Terminated at once: output_lines wakes it."""
    import threading

    quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30); print('late', flush=True)"],
                             stdout=subprocess.PIPE, text=True)
    taken = threading.Event()

    def other_thread():  # a thread of this process that does not block the signal: the kernel may pick it
        time.sleep(0.5)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        taken.set()

    try:
        with processes.signals_raise():
            threading.Thread(target=other_thread, daemon=True).start()
            started = time.monotonic()
            with pytest.raises(processes.Terminated):
                for _ in processes.output_lines(quiet):
                    pass
        assert taken.is_set()
        assert time.monotonic() - started < 2.0, "the main thread slept through the signal"
    finally:
        quiet.kill()
        quiet.wait()
