"""benchmarks/fwd_sass_fa3/sass_loops.py --stalls: the stall cycles read from the control bits of cuobjdump's
second encoding word (bits 41-44), per instruction and summed over a loop's every-iteration body."""
from __future__ import annotations

from helpers import REPO, load_script


def _module():
    return load_script(REPO / "benchmarks" / "fwd_sass_fa3" / "sass_loops.py", "sass_loops")


def _line(addr: int, text: str, stall: int) -> str:
    hi = (stall << 41) | (0x3 << 52)  # a wait mask beside the stall, which must not leak into it
    return (f"        /*{addr:04x}*/                   {text} ;   /* 0x000000ffffff79a7 */\n"
            f"                                                  /* 0x{hi:016x} */\n")


def test_stalls_read_from_the_second_word_and_summed_over_the_loop(tmp_path):
    sl = _module()
    body = [("FFMA R1, R2, R3, R4", 1), ("MUFU.EX2 R5, R5", 1), ("FADD.FTZ R6, R6, R5", 7),
            ("HGMMA.64x64x16.F32 R8, gdesc[UR4], R8", 2), ("BRA 0x0000", 5)]
    text = "\tFunction : kernel_a\n" + "".join(_line(16 * i, t, s) for i, (t, s) in enumerate(body))
    text += _line(16 * len(body), "EXIT", 15)
    path = tmp_path / "k.sass"
    path.write_text(text)
    insns = sl.read_functions(str(path))["kernel_a"]
    assert [x.stall for x in insns] == [1, 1, 7, 2, 5, 15]
    blocks = sl.build_cfg(insns)
    dom = sl.dominators(blocks)
    (loop,) = sl.natural_loops(blocks, dom)
    every = sl.loop_insns(insns, blocks, loop, dom)
    summary = sl.stalls(every)
    assert summary.startswith("16 cycles over 5 instructions")
    assert "FADD 7/1" in summary and "MUFU.EX2 1/1" in summary


def test_a_file_without_control_words_reads_zero_stalls(tmp_path):
    sl = _module()
    path = tmp_path / "k.sass"
    path.write_text("\tFunction : kernel_b\n        /*0000*/                   EXIT ;\n")
    (insn,) = sl.read_functions(str(path))["kernel_b"]
    assert insn.ctrl == -1 and insn.stall == 0
