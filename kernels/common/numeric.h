// The register-level numerics both families share: the element type of a dtype, 2^x on the SFU, the
// conversion of a register fragment to another element type, and the reductions over the four threads
// of an MMA quad (mma.sync's and wgmma's accumulators both spread a row over one quad).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include "common/params.h"

namespace flashbuild {

template <DType> struct ElementOf;
template <> struct ElementOf<DType::kFp16> { using type = cutlass::half_t; };
template <> struct ElementOf<DType::kBf16> { using type = cutlass::bfloat16_t; };

// 2^x on the SFU, denormal results flushed to zero: one MUFU.EX2. exp2f without --use_fast_math
// adds a range test and two multiplies per call to keep denormals, which a probability below
// 2^-126 does not need (and which costs the backward ~100 instructions per warp and step).
CUTE_DEVICE float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x for the softmax's exponents (x <= 0) on the FMA pipe, not the SFU: a study form (hopper/fwd_softmax.h,
// kExpOnFma) that moves a share of the exponentials off MUFU, whose 16 results a clock an SM are as many as hdim 64's
// tensor cores need a clock. x = j + f with j = round(x) (the low mantissa bits of x + 1.5 * 2^23) and f in
// [-0.5, 0.5]; 2^f by a polynomial fitted here for relative error (degree 3: 1.0e-4, degree 4: 2.9e-6; an fp16 P
// rounds by up to 4.9e-4); times 2^j, a float built from j's bits. x is first raised to -126 (NaN kept: max.NaN), so
// a masked score (-inf) gives 2^-126 where MUFU gives 0, which no fp16 or bf16 P and no fp32 row sum can tell apart
// from 0 beside the row's maximum (2^0), and a NaN score stays NaN.
template <int kDegree>
CUTE_DEVICE float exp2_on_fma(float x) {
  static_assert(kDegree == 3 || kDegree == 4, "degree 3 or 4");
  asm("max.NaN.f32 %0, %0, 0fC2FC0000;" : "+f"(x));  // -126
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  const float t = x + kRound;
  const float f = x - (t - kRound);
  float q;
  if constexpr (kDegree == 3) {
    q = fmaf(fmaf(0.05500869f, f, 0.24221063f), f, 0.69328290f);
  } else {
    q = fmaf(fmaf(fmaf(0.009582830f, f, 0.055906400f), f, 0.24024099f), f, 0.69312418f);
  }
  // 2^j: j's bits shifted into the exponent field over 1.0's (t's other bits shift out: 1.5 * 2^23's low 9 are 0).
  const float scale = __uint_as_float((__float_as_uint(t) << 23) + 0x3f800000u);
  return fmaf(q * f, scale, scale);
}

// Element-wise conversion of a register fragment into another of the same size (e.g. fp32
// accumulators into fp16 operand registers laid out otherwise), vectorised.
template <class SrcEngine, class SrcLayout, class DstEngine, class DstLayout>
CUTE_DEVICE void convert_into(cute::Tensor<SrcEngine, SrcLayout> const& src, cute::Tensor<DstEngine, DstLayout>& dst) {
  using From = typename SrcEngine::value_type;
  using To = typename DstEngine::value_type;
  constexpr int kN = decltype(cute::size(src))::value;
  static_assert(decltype(cute::size(dst))::value == kN, "a conversion keeps the number of values");
  cutlass::NumericArrayConverter<To, From, kN> convert;
  *reinterpret_cast<cutlass::Array<To, kN>*>(dst.data()) =
      convert(*reinterpret_cast<cutlass::Array<From, kN> const*>(src.data()));
}

// The same into a new fragment of src's layout.
template <typename To, class Engine, class Layout>
CUTE_DEVICE auto convert_type(cute::Tensor<Engine, Layout> const& src) {
  cute::Tensor dst = cute::make_tensor<To>(src.layout());
  convert_into(src, dst);
  return dst;
}

// The four threads of an MMA quad hold the same accumulator rows.
CUTE_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
}
CUTE_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 2);
  return x + __shfl_xor_sync(0xffffffff, x, 1);
}

}  // namespace flashbuild
