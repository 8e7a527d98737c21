"""Host-side launch rules, compiled with the host C++ compiler and run on the CPU (no GPU, no torch):
the 16-byte vector rule every kernel shares (common/params.h vector_addressable, which
hopper/tma_checks.h's tma_addressable is), the grid limits a launch checks by name
(check_grid_yz), and the split-KV heuristic's range (common/splitkv_heuristic.h)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from flashbuild import env

REPO = Path(__file__).resolve().parent.parent
CXX = shutil.which("g++") or shutil.which("c++")


def _cuda_include() -> Path | None:
    nvcc = env.find_nvcc()
    if nvcc is None:
        return None
    for root in (Path(nvcc.path).resolve().parent.parent, Path("/usr/local/cuda")):
        if (root / "include" / "cuda_runtime.h").is_file():
            return root / "include"
    return None


CUDA_INCLUDE = _cuda_include()
pytestmark = pytest.mark.skipif(CXX is None or CUDA_INCLUDE is None,
                                reason="needs a host C++ compiler and the CUDA headers (cuda_runtime.h)")


def run_cpp(tmp_path: Path, body: str) -> str:
    """Compiles `body` (main's statements) against kernels/ and runs it; returns its stdout."""
    source = tmp_path / "t.cpp"
    source.write_text(
        '#include <cstdio>\n#include <exception>\n#include "common/params.h"\n#include "common/splitkv_heuristic.h"\n'
        '#include "hopper/tma_checks.h"\nusing namespace flashbuild;\n'
        f"int main() {{\n{body}\nreturn 0;\n}}\n")
    binary = tmp_path / "t"
    subprocess.run([CXX, "-std=c++17", "-O1", f"-I{REPO / 'kernels'}", f"-I{CUDA_INCLUDE}", str(source), "-o",
                    str(binary)], check=True, capture_output=True, text=True)
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done.stdout


def test_vector_rule_rejects_odd_offsets_and_strides_and_skips_unit_extents(tmp_path):
    # fp16 (2 bytes): a (batch 2, seqlen 97, heads 4, dim 64) tensor, its views, and a view at an odd offset.
    out = run_cpp(tmp_path, r'''
  alignas(16) static char buf[1 << 16];
  const void* base = buf;
  const void* odd = buf + 2;   // x[..., 1:]: one element past an aligned start
  auto show = [](const char* name, bool ok) { std::printf("%s %d\n", name, ok ? 1 : 0); };
  show("contiguous", vector_addressable(base, 2, {{256, 97}, {64, 4}, {97 * 256, 2}}));
  show("odd_pointer", vector_addressable(odd, 2, {{256, 97}, {64, 4}, {97 * 256, 2}}));
  show("head_stride_65", vector_addressable(base, 2, {{260, 97}, {65, 4}, {97 * 260, 2}}));
  show("unit_extent_odd_stride", vector_addressable(base, 2, {{256, 97}, {65, 1}, {3, 1}}));
  show("broadcast_stride_0", vector_addressable(base, 2, {{256, 97}, {0, 4}}));
  show("tma_same_rule", hopper::tma_addressable(odd, 2, {{256, 97}}) == vector_addressable(odd, 2, {{256, 97}}));
  show("fp32_stride_4", vector_addressable(base, 4, {{4, 8}}));
''')
    got = dict(line.split() for line in out.splitlines())
    assert got == {"contiguous": "1", "odd_pointer": "0", "head_stride_65": "0", "unit_extent_odd_stride": "1",
                   "broadcast_stride_0": "0", "tma_same_rule": "1", "fp32_stride_4": "1"}, got


def test_grid_limit_is_an_error_naming_the_limit_and_the_fix(tmp_path):
    out = run_cpp(tmp_path, r'''
  check_grid_yz("the Ampere-path forward", 16, 65535);  // at the limit: fine
  try {
    check_grid_yz("the Ampere-path forward", 16, 70000);
    std::printf("no error\n");
  } catch (std::exception const& e) {
    std::printf("%s\n", e.what());
  }
''')
    assert "70000" in out and "65535" in out and "Ampere-path forward" in out and "Split the call" in out, out


def test_split_heuristic_stays_in_range_for_every_call(tmp_path):
    # The binding sizes o_accum/lse_accum by the count and run_splitkv refuses 0 or > kMaxSplits; an empty
    # call (batch, heads or query rows 0) never reaches the heuristic (it divides by the CTA count).
    out = run_cpp(tmp_path, r'''
  int bad = 0, calls = 0;
  for (int batch : {1, 2, 3, 7, 64, 200})
    for (int nheads : {1, 2, 8, 32})
      for (int seqlen_q : {1, 2, 16, 64, 65, 300})
        for (int seqlen_k : {0, 1, 127, 128, 512, 513, 4096, 100000})
          for (int hdim : {32, 64, 128, 192, 256})
            for (int sms : {1, 78, 108, 132}) {
              const int s = choose_num_splits(batch, nheads, seqlen_q, seqlen_k, hdim, sms);
              const int n_blocks = (seqlen_k + splitkv_block_n(hdim) - 1) / splitkv_block_n(hdim);
              const int m_blocks = (seqlen_q + kSplitKVBlockM - 1) / kSplitKVBlockM;
              const bool full = batch * nheads * m_blocks >= sms;
              ++calls;
              if (s < 1 || s > kMaxSplits || (full && s != 1) || (s > 1 && s > n_blocks / 4)) {
                if (bad++ < 5) std::printf("bad %d %d %d %d %d %d -> %d\n", batch, nheads, seqlen_q, seqlen_k, hdim, sms, s);
              }
            }
  std::printf("calls %d bad %d\n", calls, bad);
''')
    assert out.strip().endswith("bad 0"), out


def test_split_heuristic_gives_an_empty_call_one_split(tmp_path):
    """An empty decode call (batch, heads or query rows 0; run_splitkv returns after any append) reaches
    the heuristic with no CTAs: it divided by that count (SIGFPE, the whole Python process)."""
    out = run_cpp(tmp_path, r'''
  std::printf("%d %d %d\n", choose_num_splits(0, 8, 1, 4096, 128, 132), choose_num_splits(2, 0, 1, 4096, 128, 132),
              choose_num_splits(2, 8, 0, 4096, 128, 132));
''')
    assert out.split() == ["1", "1", "1"], out


def test_the_one_wave_heuristic_fills_the_sms_once(tmp_path):
    """The Hopper split-KV's count (choose_num_splits_one_wave): in range, one split when the CTAs fill the SMs
    already, never more tiles than SMs, at least two key blocks per split, and an empty call one split."""
    out = run_cpp(tmp_path, r'''
  int bad = 0, calls = 0;
  for (int batch : {0, 1, 2, 3, 7, 64, 200})
    for (int nheads : {0, 1, 2, 8, 32})
      for (int seqlen_q : {0, 1, 2, 16, 64, 65, 300})
        for (int seqlen_k : {0, 1, 127, 128, 512, 513, 4096, 65536, 100000})
          for (int sms : {1, 78, 108, 132}) {
            const int s = choose_num_splits_one_wave(batch, nheads, seqlen_q, seqlen_k, 64, 128, sms);
            const int ctas = batch * nheads * ((seqlen_q + 63) / 64);
            const int n_blocks = (seqlen_k + 127) / 128;
            ++calls;
            if (s < 1 || s > kMaxSplits || (ctas >= sms && s != 1) || (s > 1 && (s * ctas > sms || s > n_blocks / 2)) ||
                (ctas == 0 && s != 1)) {
              if (bad++ < 5) std::printf("bad %d %d %d %d %d -> %d\n", batch, nheads, seqlen_q, seqlen_k, sms, s);
            }
          }
  std::printf("%d %d %d calls %d bad %d\n", choose_num_splits_one_wave(1, 8, 4, 65536, 64, 128, 132),
              choose_num_splits_one_wave(8, 8, 4, 65536, 64, 128, 132),
              choose_num_splits_one_wave(1, 8, 4, 4096, 64, 128, 132), calls, bad);
''')
    assert out.strip().endswith("bad 0") and out.split()[:3] == ["16", "2", "16"], out


def test_the_hopper_split_count_fills_two_ctas_an_sm_only_for_short_splits(tmp_path):
    """The Hopper split-KV's count (choose_num_splits_hopper: two CTAs an SM, hopper/fwd_params.h): in range, one
    split when the CTAs fill two an SM already, never more tiles than two CTAs an SM hold, at least 128 keys a split,
    and the counts issue 45's table measured (benchmarks/decode/README.md, "Two CTAs per SM"): batch 1 with 4k keys
    32 splits at head dim 64 (a split of 256 keys reads 64 KB), 16 at head dim 128 (128 KB); 16 at 64k keys; batch 8
    two; batch 64 one."""
    out = run_cpp(tmp_path, r'''
  int bad = 0, calls = 0;
  for (int hdim : {32, 64, 96, 128})
    for (int batch : {0, 1, 2, 3, 7, 64, 200})
      for (int nheads : {0, 1, 2, 8, 32})
        for (int seqlen_q : {0, 1, 2, 16, 64, 65, 300})
          for (int seqlen_k : {0, 1, 127, 128, 512, 513, 4096, 65536, 100000})
            for (int sms : {1, 78, 108, 132}) {
              const int s = choose_num_splits_hopper(batch, nheads, seqlen_q, seqlen_k, hdim, sms);
              const int ctas = batch * nheads * ((seqlen_q + 63) / 64);
              const int block_n = hopper_splitkv_block_n(hdim);
              const int n_blocks = (seqlen_k + block_n - 1) / block_n;
              ++calls;
              const int slots = kHopperSplitKVCtasPerSm * sms;
              if (s < 1 || s > kMaxSplits || (ctas >= slots && s != 1) || (ctas == 0 && s != 1) ||
                  (s > 1 && (s * ctas > slots || s * (128 / block_n) > n_blocks))) {
                if (bad++ < 5)
                  std::printf("bad %d %d %d %d %d %d -> %d\n", hdim, batch, nheads, seqlen_q, seqlen_k, sms, s);
              }
            }
  std::printf("%d %d %d %d %d %d calls %d bad %d\n", choose_num_splits_hopper(1, 8, 1, 4096, 64, 132),
              choose_num_splits_hopper(1, 8, 1, 4096, 128, 132), choose_num_splits_hopper(1, 8, 1, 65536, 64, 132),
              choose_num_splits_hopper(1, 8, 1, 65536, 128, 132), choose_num_splits_hopper(8, 8, 1, 4096, 64, 132),
              choose_num_splits_hopper(64, 8, 1, 16384, 128, 132), calls, bad);
''')
    assert out.strip().endswith("bad 0") and out.split()[:6] == ["32", "16", "16", "16", "2", "1"], out


def test_the_hopper_tile_count_past_32_bits_is_refused_with_the_batch_that_fits(tmp_path):
    """check_tile_count (common/params.h), which the Hopper forward and split-KV launches call: a packed call whose
    tiles (query blocks x heads x batch x splits) pass INT32_MAX less the grid would wrap the scheduler's int (65,537
    sequences of up to 128k rows, 64 heads, 128-row blocks: 2^32 + 2^16 tiles, read as 65,536, the rest of the
    output never written); it is refused naming the counts and the batch that fits. The largest call that fits
    passes, and so do empty ones."""
    out = run_cpp(tmp_path, r'''
  auto show = [](const char* name, auto&& call) {
    try { call(); std::printf("%s ok\n", name); }
    catch (const std::exception& e) { std::printf("%s error %s\n", name, e.what()); }
  };
  show("wraps", [] { check_tile_count("the Hopper forward", 1024, 64, 65537, 1, 132); });
  show("negative", [] { check_tile_count("the Hopper forward", 1024, 32, 65536, 1, 132); });
  show("splits", [] { check_tile_count("the Hopper split-KV", 1, 64, 300000, 128, 264); });
  show("one_too_many", [] { check_tile_count("the Hopper forward", 1, 1, 1LL << 40, 1, 132); });
  show("fits", [] { check_tile_count("the Hopper forward", 1024, 64, (INT32_MAX - 132) / (1024 * 64), 1, 132); });
  show("past", [] { check_tile_count("the Hopper forward", 1024, 64, (INT32_MAX - 132) / (1024 * 64) + 1, 1, 132); });
  show("empty", [] { check_tile_count("the Hopper forward", 0, 64, 1 << 30, 1, 132); });
  show("dense", [] { check_tile_count("the Hopper forward", 128, 16, 8, 1, 132); });
''')
    got = {line.split()[0]: line.split(" ", 1)[1] for line in out.splitlines()}
    for name in ("fits", "empty", "dense"):
        assert got[name] == "ok", (name, got[name])
    for name in ("wraps", "negative", "splits", "one_too_many", "past"):
        assert got[name].startswith("error flashbuild: the Hopper "), (name, got[name])
        assert "32 bits" in got[name] and "Split the call into batches of at most" in got[name], got[name]
    assert "1024 x 64 x 65537 x 1" in got["wraps"] and "at most 32767 sequences" in got["wraps"], got["wraps"]
    assert "1 x 64 x 300000 x 128" in got["splits"], got["splits"]
