"""FLASHBUILD_SPLITKV_TIMELINE, the decode timeline study build's buffer (kernels/common/timeline.h,
timeline_launch_buffer), read by the launch at each launch of the study build: a host program compiled with nvcc and
the define (no GPU needed) parses the variable as the launch does and prints what it got. Unset or empty: no buffer;
anything not <address>:<calls>:<ctas>:<tag> with decimal non-zero numbers: the named error; a well-formed value whose
address is not device memory (here: no device at all, or host memory): the named error, never a write through it.
Every error printable and short."""

from __future__ import annotations

import os
import subprocess

import pytest

from flashbuild import env
from helpers import requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

ENV = "FLASHBUILD_SPLITKV_TIMELINE"
KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels")
PROGRAM = r'''
#include <cstdio>
#include "common/timeline.h"
int main() {
  try {
    std::printf("ok %d\n", flashbuild::timeline_launch_buffer(128) == nullptr ? 0 : 1);
  } catch (const std::runtime_error& e) {
    std::printf("error %s\n", e.what());
  }
  return 0;
}
'''


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    where = tmp_path_factory.mktemp("timeline_env")
    (where / "p.cu").write_text(PROGRAM)
    cutlass = env.cutlass_include_dir()
    if cutlass is None:
        pytest.skip("needs the CUTLASS headers (the nvidia-cutlass wheel)")
    done = subprocess.run([str(env.find_nvcc().path), "-std=c++17", "-DFLASHBUILD_SPLITKV_TIMELINE=1", f"-I{KERNELS}",
                           f"-I{cutlass}", str(where / "p.cu"), "-o", str(where / "p")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return where / "p"


def run(binary, value) -> str:
    environ = {k: v for k, v in os.environ.items() if k != ENV}
    if value is not None:
        environ[ENV] = value
    done = subprocess.run([str(binary)], env=environ, capture_output=True, timeout=30)
    assert done.returncode == 0, (value, done.returncode, done.stderr[-2000:])
    return done.stdout.decode("utf-8", "replace").strip()


@pytest.mark.parametrize("value", [None, ""])
def test_unset_or_empty_records_nothing(program, value):
    assert run(program, value) == "ok 0"


@pytest.mark.parametrize("value", ["x", "1", "1:2:3", "0:32:1024:1", "140000000:0:1024:1", "140000000:32:0:1",
                                   "-1:32:1024:1", "0x10:32:1024:1", "12 :32:1024:1", ":::", "1:2:3:4" + "\x1b[31m",
                                   "\u00e9:1:1:1", "9" * 5000], ids=lambda v: repr(v)[:24])
def test_a_malformed_value_is_the_named_error(program, value):
    out = run(program, value)
    kind, _, rest = out.partition(" ")
    if value.startswith("1:2:3:4"):  # well-formed (the tag is anything after the third colon): the address check
        assert kind == "error" and "not device memory" in rest, (value, out)
    else:
        assert kind == "error" and f"flashbuild: {ENV}=" in rest and "<address>:<calls>:<ctas>:<tag>" in rest, \
            (value, out)
    assert len(rest) < 600 and rest.isprintable(), (value, out)


def test_an_address_that_is_not_device_memory_is_refused(program):
    out = run(program, "4096:32:1024:1")
    assert out.startswith("error flashbuild: " + ENV + "=4096:32:1024:1: the address is not device memory"), out
