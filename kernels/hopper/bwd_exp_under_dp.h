// A study form of the Hopper backward's kKeys step (bwd_mainloop.h, kExpUnderDp; off by default, nvcc
// -DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP=1 / 2 / 3 at hdim 128, kernels without softcap; benchmarks/hopper_bwd_exp_under_dp/).
// ptxas moves the step's wait for dP^T up to its first exponential (1 of 32 issued under dP^T's product; FA3 13-14),
// though the PTX has all 32 before it. It keeps shared-memory accesses, and block boundaries, on their side of that
// wait, so a store that reads P^T placed before it pins the exponentials there: P^T converted to 16 bits and stored
// (stmatrix) into the step's dS^T buffer, which the warpgroup's own dS^T overwrites at the same addresses later in the
// step (so the store is harmless whether it runs or not). Form 1: all of P^T, the store branched over by a test the
// compiler cannot fold and that is never true (seqlen_q < 0); 2: the same, stored every step; 3: the first half of
// P^T, branched over, the other half's exponentials after it (exps_from).
#pragma once

#include <cute/tensor.hpp>

#include "common/numeric.h"  // convert_into, exp2_ftz
#include "hopper/sm90.h"

namespace flashbuild::hopper {

// rP = P^T (tSrS) converted, its first kStores x 8 values (form 3: half) by convert_into's pairs (so that the step's
// later convert_into of the same values is the same instruction), and stored into `rows` (form 2; forms 1 and 3 when
// seqlen_q < 0, never).
template <int kForm, class FragS, class FragP, class SmemRows>
CUTE_DEVICE void pin_exps(int seqlen_q, FragS const& tSrS, FragP& rP, SmemRows const& rows) {
  using namespace cute;
  constexpr int kValues = decltype(size(rP))::value;
  constexpr int kStores = kForm == 3 ? kValues / 16 : kValues / 8;  // stmatrix x4: 8 values a thread
  Tensor converted = make_tensor(rP.data(), make_layout(Int<kStores * 8>{}));
  convert_into(make_tensor(tSrS.data(), make_layout(Int<kStores * 8>{})), converted);
  if (kForm == 2 || seqlen_q < 0) {
    using SmemLayout = remove_cvref_t<decltype(rows.layout())>;
    Tensor words = recast<uint32_t>(rP);
    CUTE_UNROLL
    for (int i = 0; i < kStores; ++i) {
      auto& dst = reinterpret_cast<uint128_t&>(*(rows.data() + SmemLayout{}(0, 16 * i)));
      SM90_U32x4_STSM_N::copy(words(4 * i), words(4 * i + 1), words(4 * i + 2), words(4 * i + 3), dst);
    }
  }
}

// Form 3's second half: P^T = exp2(S^T * scale log2 e - LSE log2 e) for values kBegin.. of tSrS (the step's
// probabilities<kBegin> did the mask and the values before). RowStats: bwd_row_stats.h, stats in shared memory or
// one register a row.
template <class RowStats, int kBegin, class FragS, class Coords, class Lse>
CUTE_DEVICE void exps_from(float scale_log2, Lse const& lse_log2, Coords const& cS, FragS& tSrS) {
  CUTE_UNROLL
  for (int i = kBegin; i < cute::size(tSrS); ++i) {
    tSrS(i) = exp2_ftz(fmaf(tSrS(i), scale_log2, -RowStats::at(lse_log2, cS, i)));
  }
}

}  // namespace flashbuild::hopper
