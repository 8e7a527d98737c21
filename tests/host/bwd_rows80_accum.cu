// Host-only check of the rows-80 form's dq_accum order (kernels/hopper/bwd_rows80.h, bwd_dq_accum.h), run by
// tests/test_compile_bwd_rows80.py. No device code runs: nvcc compiles it for the host.
//
// For the 80-row traits, with one hand-off and with the per-warpgroup halves:
//   - CuTe's own partition of dQ^T's product (TiledMmadQ, partition_C of the (head_dim, query rows) tile): float4 g
//     of every consumer thread lies in query rows [8g, 8g + 8) of the block, the property the writer's partial
//     last block rests on;
//   - vec(g, t) is a bijection onto the block's float4s, the same with or without halves, and warpgroup h's
//     float4s are exactly the writer's runs [g * kGroupBytes + h * kGroupBytes / 2, + kGroupBytes / 2);
//   - for every seqlen_q 1 .. 20000 the writer's bytes of every block cover the block's rows and, for the last
//     block, end inside the rows the binding allocates (seqlen_q rounded up to kDqAccumRowPad) and, packed, inside
//     the sequence's slack (kDqAccumRowPad rows).
// Prints one summary line; every failure prints a line starting with FAIL, and the exit code is 1.
#include <cstdio>
#include <set>

#include "hopper/bwd_dq_accum.h"

using namespace flashbuild;
using namespace flashbuild::hopper;

namespace {

long g_checks = 0, g_failures = 0;

void expect(bool ok, const char* what, long a, long b) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    if (g_failures < 50) { std::printf("FAIL %s (%ld, %ld)\n", what, a, b); }
  }
}

template <bool kHalves>
void check() {
  using Traits = BwdTraits<128, 80, 128, cutlass::half_t, DqOrder::kFragmentBulk, false, true, false, false, kHalves, 2>;
  using Layout = DqAccumLayout<Traits>;
  static_assert(Traits::kDqSwapAB && Traits::kDqHalves == kHalves, "the form under test");
  constexpr int kThreads = Traits::kNumMmaThreads;
  constexpr int kVecs = Layout::kVecsPerThread;
  constexpr int kBlockM = Traits::kBlockM;

  // CuTe's partition of dQ^T: (head_dim, query rows) coordinates of each thread's accumulator values.
  typename Traits::TiledMmadQ mma;
  Tensor id = make_identity_tensor(Shape<Int<Traits::kHeadDim>, Int<kBlockM>>{});
  std::set<int> seen;
  for (int t = 0; t < kThreads; ++t) {
    Tensor c = mma.get_slice(t).partition_C(id);
    expect(int(size(c)) == 4 * kVecs, "values a thread", long(size(c)), 4L * kVecs);
    for (int i = 0; i < int(size(c)); ++i) {
      const int row = get<1>(c(i));  // a query row: dQ^T's N
      expect(row / Layout::kRowsPerGroup == i / 4, "float4 g holds query rows [8g, 8g + 8)", row, i);
    }
    for (int g = 0; g < kVecs; ++g) {
      const int v = Layout::vec(g, t);
      expect(v == g * kThreads + t, "the groups first", v, long(g) * kThreads + t);
      seen.insert(v);
      // The writer's run of this thread's warpgroup in group g (bwd_epilogue.h, dq_writer).
      const long byte = long(v) * 16, run = long(g) * Layout::kGroupBytes + (t / kWarpgroupThreads) * (Layout::kGroupBytes / 2);
      if (kHalves) { expect(byte >= run && byte < run + Layout::kGroupBytes / 2, "inside its warpgroup's run", byte, run); }
    }
  }
  expect(int(seen.size()) == kThreads * kVecs && *seen.rbegin() == kThreads * kVecs - 1, "a bijection", long(seen.size()), 0);

  for (int seqlen = 1; seqlen <= 20000; ++seqlen) {
    const long rows_alloc = (seqlen + kDqAccumRowPad - 1) / kDqAccumRowPad * kDqAccumRowPad;
    const int blocks = (seqlen + kBlockM - 1) / kBlockM;
    for (int m = 0; m < blocks; ++m) {
      const int rows_left = seqlen - m * kBlockM;
      const long groups = Layout::valid_groups(rows_left);
      expect(groups * Layout::kRowsPerGroup >= (rows_left < kBlockM ? rows_left : kBlockM), "covers the rows", seqlen, m);
      expect(Layout::valid_bytes(rows_left) == groups * Layout::kGroupBytes, "bytes", seqlen, m);
      const long end_row = long(m) * kBlockM + groups * Layout::kRowsPerGroup;  // one past the last row added
      expect(end_row <= rows_alloc, "dense: inside the allocated rows", seqlen, m);
      expect(end_row <= seqlen + kDqAccumRowPad, "packed: inside the sequence's slack", seqlen, m);
    }
  }
}

}  // namespace

int main() {
  check<false>();
  check<true>();
  std::printf("checked %ld properties of the rows-80 dq_accum order, %ld failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
