// 2^x on the FMA pipe, for the backward's BwdTraits::kExpPoly (bwd_traits.h): the MUFU unit computes 16
// exponentials per clock per SM, and at hdim 64 the tensor cores wait on it between S^T and dV's product
// (benchmarks/hopper_bwd_fa3/README.md), so a share of P^T's exponentials is computed here instead.
// x = n + f with n = round(x): adding 1.5 * 2^23 leaves n in the low mantissa bits of t (|x| < 2^22),
// so f = x - (t - 1.5 * 2^23) in [-0.5, 0.5] exactly; 2^f by a degree-4 polynomial (relative error
// under 2.7e-6 in fp32 Horner, against fp16's half ulp of 2.4e-4; coefficients fitted for the relative
// error: the study's README has the fit); then n is added to the result's exponent field. x is clamped
// at -126 so that the field stays in range: where MUFU's flush-to-zero exp2 gives 0 (a masked score is
// -inf, a row past seqlen_q has LSE +inf), this gives at most 2^-126, which the 16-bit P^T and dS^T
// round to 0. Host and device (tests/host/bwd_exp2.cu checks it on the CPU); the adds are the
// _rn intrinsics on the device so that no fast-math contraction touches the rounding trick.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace flashbuild::hopper {

__host__ __device__ inline float exp2_poly(float x) {
  constexpr float kShift = 12582912.f;  // 1.5 * 2^23
  x = fmaxf(x, -126.f);
#if defined(__CUDA_ARCH__)
  const float t = __fadd_rn(x, kShift);
  const float f = __fsub_rn(x, __fsub_rn(t, kShift));
#else
  volatile float t_ = x + kShift;  // volatile: the host compiler keeps the rounding add
  const float t = t_;
  const float f = x - (t - kShift);
#endif
  float p = fmaf(0.009570038877427578f, f, 0.05591768026351929f);
  p = fmaf(p, f, 0.240247443318367f);
  p = fmaf(p, f, 0.6931218504905701f);
  p = fmaf(p, f, 0.9999992847442627f);
#if defined(__CUDA_ARCH__)
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
#else
  uint32_t pb, tb;
  std::memcpy(&pb, &p, 4);
  std::memcpy(&tb, &t, 4);
  const uint32_t r = pb + (tb << 23);
  float out;
  std::memcpy(&out, &r, 4);
  return out;
#endif
}

}  // namespace flashbuild::hopper
