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
