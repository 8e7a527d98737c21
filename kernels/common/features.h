// The compiled-in features of a kernel (kFeatures, common/params.h) as the kernels use them: the
// softcap score transform and the mask of a local kernel. A feature compiled in stays off at
// runtime unless the call asks for it: softcap = 0 skips the transform, and the binding gives a
// call without a window bounds that cut nothing.
#pragma once

#include <cute/tensor.hpp>

#include "common/mask.h"
#include "common/params.h"

namespace flashbuild {

template <int kFeatures>
inline constexpr bool kHasLocal = (kFeatures & kLocal) != 0;
template <int kFeatures>
inline constexpr bool kHasSoftcap = (kFeatures & kSoftcap) != 0;

// tanh on the SFU (sm75+): relative error about 2^-11, below the fp16/bf16 rounding of P.
CUTE_DEVICE float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// How raw Q·K^T scores become the exponent of the softmax. Without softcap the scale folds into
// the exp2 (scale_log2); with it the scores first become tanh(s * softmax_scale / softcap) and
// the softmax scale is the softcap itself.
template <int kFeatures>
struct ScoreScale {
  float scale;       // multiplies the (transformed) score: natural-log units, for the LSE
  float scale_log2;  // the same in the exp2 domain
  float tanh_scale;  // softmax_scale / softcap
  bool softcap_on;

  template <class Params>
  CUTE_DEVICE explicit ScoreScale(Params const& params)
      : scale(params.softmax_scale), scale_log2(params.softmax_scale_log2), tanh_scale(0.f), softcap_on(false) {
    if constexpr (kHasSoftcap<kFeatures>) {
      if (params.softcap > 0.f) {
        softcap_on = true;
        tanh_scale = params.softmax_scale / params.softcap;
        scale = params.softcap;
        scale_log2 = params.softcap * kLog2e;
      }
    }
  }

  // acc_s := tanh(acc_s * tanh_scale) when softcap is on; before masking (masked scores stay -inf).
  template <class Acc>
  CUTE_DEVICE void transform(Acc& acc_s) const {
    if constexpr (kHasSoftcap<kFeatures>) {
      if (softcap_on) {
        CUTE_UNROLL
        for (int i = 0; i < cute::size(acc_s); ++i) { acc_s(i) = fast_tanh(acc_s(i) * tanh_scale); }
      }
    }
  }
};

// The mask of a kernel with these features, for one sequence.
template <bool kIsCausal, int kFeatures, class Params>
CUTE_DEVICE AttentionMask<kIsCausal, kHasLocal<kFeatures>> make_mask(Params const& params, int seqlen_q, int seqlen_k) {
  if constexpr (kHasLocal<kFeatures>) {
    return {seqlen_q, seqlen_k, params.window_left, params.window_right};
  } else {
    return {seqlen_q, seqlen_k};
  }
}

}  // namespace flashbuild
