"""The decode timeline study build (kernels/common/timeline.h, benchmarks/decode_timeline/): with
-DFLASHBUILD_SPLITKV_TIMELINE=1 the Hopper split-KV at hdim 64 (plain, non-causal) compiles, launch TU included (the
host side that reads FLASHBUILD_SPLITKV_TIMELINE and the kernel parameter's extra pointer), its decode tile reads
%globaltimer at each of the six points of TimelineSlot and keeps its 128 registers with nothing on the stack and no
spills, and the 64-row kernel, which has no hooks, reads no timer. Real nvcc, no GPU. (That the default build's SASS
is unchanged is checked by benchmarks/house_sass, targets-splitkv-timeline.txt.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

# entry, griddepcontrol.wait, first K stage, last block, stores, end (common/timeline.h, TimelineSlot)
TIMER_READS = 6


def test_the_timeline_study_build_records_every_point_without_spills(tmp_path):
    cache = tmp_path / "cache"
    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}
    environ.pop("FLASHBUILD_ROOT", None)
    args = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "splitkv", "--causal", "off",
            "--no-local", "--no-softcap", "--compile-only", "--jobs", "1",
            "--nvcc-flag=-DFLASHBUILD_SPLITKV_TIMELINE=1"]
    result = subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True, env=environ,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    from flashbuild.debug import inspection

    name = "splitkv_hdim64_fp16_sm90_kernel_decode"
    obj = build_dir / "obj" / f"{name}.o"
    (decode,) = [r for r in inspection.inspect_object(name, obj) if "splitkv_decode_kernel" in r.kernel]
    assert decode.spill_store_bytes == 0 and decode.spill_load_bytes == 0 and decode.stack_bytes == 0, decode
    assert decode.registers <= 128, decode
    sass = inspection.sass_text(obj)
    # nvcc 13.0 reads the 64-bit %globaltimer as one CS2R of SR_GLOBALTIMERLO (the form this test knows)
    reads = len(re.findall(r"CS2R\s+R\d+, SR_GLOBALTIMERLO", sass))
    assert reads == TIMER_READS, f"{reads} reads of %globaltimer in the decode tile, not {TIMER_READS}"
    assert "SR_VIRTUALSMID" in sass or "SR_SMID" in sass, "the CTA's SM is not read"
    assert (build_dir / "obj" / "splitkv_hdim64_fp16_sm90.o").is_file(), "the launch TU did not compile"

    rows64 = build_dir / "obj" / "splitkv_hdim64_fp16_sm90_kernel.o"
    assert "GLOBALTIMER" not in inspection.sass_text(rows64), "the 64-row kernel has no hooks, yet reads the timer"
