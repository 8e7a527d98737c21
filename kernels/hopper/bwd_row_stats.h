// The Hopper backward's per-row statistics (each query row's LSE and dsum, which a stage keeps in shared memory) as
// a consumer thread of the kKeys split reads them for its S^T / dP^T values (bwd_mainloop.h, kStatsForm): where it
// uses them (`at` on the stage's row), or loaded into registers beforehand, one register a row (`registers`) or a
// share of the rows per lane with the rest fetched by __shfl_sync (`shuffled`, FlashAttention-3's ShuffleLSE /
// ShuffledPsum). With keys as S^T's rows, a thread's values sit in kBlockM / 4 query rows (its accumulator's columns:
// the column pair of lane % 4 in each 8-column group), and the same rows for both key rows it holds (8 apart).
#pragma once

#include "hopper/sm90.h"

namespace flashbuild::hopper {

template <int kBlockM, class AccShape>
struct BwdRowStats {
  static constexpr int kRowsPerThread = kBlockM / 4;
  static constexpr int kShuffledPerLane = kRowsPerThread / 8;

  // A query row's LSE or dsum for value i of S^T / dP^T: read from the stage's row in shared memory (an array or a
  // pointer), or taken from the registers `registers` filled.
  template <class Stats, class Coords>
  CUTE_DEVICE static float at(Stats const& stats, Coords const& cS, int i) {
    if constexpr (std::is_array_v<Stats> || std::is_pointer_v<Stats>) {
      return stats[get<1>(cS(i))];
    } else {
      return stats(i);
    }
  }

  // The stage's LSE (or dsum) of the rows this thread's values hold, in registers: a tensor of the accumulator's
  // shape whose two key rows (8 apart) share one register, so kRowsPerThread floats (16 at hdim 128, 32 at hdim 64)
  // and as many loads, issued where the call stands.
  using Layout_ = Layout<AccShape, Stride<Stride<_1, _0, _2>, _0, _0>>;
  template <class Coords>
  CUTE_DEVICE static auto registers(float const* stats, Coords const& cS) {
    Tensor r = make_tensor<float>(Layout_{});
    static_assert(decltype(cosize(Layout_{}))::value * 2 == decltype(size(Layout_{}))::value);
    CUTE_UNROLL
    for (int i = 0; i < size(r); ++i) { r(i) = stats[get<1>(cS(i))]; }
    return r;
  }

  // The same rows spread over the 8 lanes that share lane % 4 (the lanes whose values sit in the same query rows, at
  // other keys): lane l holds the thread's rows j = l / 4 + 8 t, t < kShuffledPerLane (4 floats at hdim 64), and
  // each row's value is taken from its lane by __shfl_sync where it is used (for_each_row). Row j of a thread is
  // value j % 2 + 4 (j / 2) of its accumulator (the column pair, the 8-column group).
  struct Shuffled {
    float v[kShuffledPerLane];
    int quad;  // lane % 4
  };
  template <class Stats>
  static constexpr bool kIsShuffled = std::is_same_v<Stats, Shuffled>;
  template <class Coords>
  CUTE_DEVICE static Shuffled shuffled(float const* stats, Coords const& cS) {
    const int lane = int(threadIdx.x) % cutlass::NumThreadsPerWarp;
    Shuffled r;
    r.quad = lane % 4;
    CUTE_UNROLL
    for (int t = 0; t < kShuffledPerLane; ++t) {
      const int j = lane / 4 + 8 * t;
      r.v[t] = stats[get<1>(cS(j % 2 + 4 * (j / 2)))];
    }
    return r;
  }
  // f(value, i) for every value i of S^T / dP^T, one shuffle per row (both key rows of a row use it). Every lane
  // of the warp takes part (the full mask).
  template <class F>
  CUTE_DEVICE static void for_each_row(Shuffled const& s, F&& f) {
    CUTE_UNROLL
    for (int j = 0; j < kRowsPerThread; ++j) {
      const float x = __shfl_sync(0xffffffff, s.v[j / 8], (j % 8) * 4 + s.quad);
      f(x, j % 2 + 4 * (j / 2));
      f(x, j % 2 + 4 * (j / 2) + 2);
    }
  }
};

}  // namespace flashbuild::hopper
