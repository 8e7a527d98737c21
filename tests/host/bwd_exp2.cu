// Host-only check of the backward's polynomial exp2 (kernels/hopper/bwd_exp2.h, BwdTraits::kExpPoly),
// run by tests/test_bwd_exp2.py: nvcc compiles it for the host, where exp2_poly takes the same IEEE
// round-to-nearest adds and fmas as on the device.
//   - every x in [-125.5, 4] on a grid of 2^-12 (and the grid's neighbours one ulp either side): relative
//     error against exp2 in double at most 3e-6 (fp16's half ulp is 2.4e-4);
//   - x below -125.5, -inf and -FLT_MAX (a masked score; a row whose LSE is +inf): finite, at least 0 and at
//     most 2^-125 (MUFU's flush-to-zero exp2 gives 0 there; both round to 0 in fp16 and bf16);
//   - exact at the integers: 2^n within the same bound.
// Prints one summary line; every failure prints a line starting with FAIL, and the exit code is 1.
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "hopper/bwd_exp2.h"

using flashbuild::hopper::exp2_poly;

namespace {
long g_checked = 0, g_failures = 0;
double g_worst = 0.0;
float g_worst_x = 0.f;

void check_rel(float x) {
  const double ref = std::exp2(static_cast<double>(x));
  const double got = exp2_poly(x);
  const double rel = std::fabs(got - ref) / ref;
  ++g_checked;
  if (rel > g_worst) { g_worst = rel, g_worst_x = x; }
  if (!(rel <= 3e-6)) {  // NaN fails too
    if (++g_failures <= 20) { std::printf("FAIL x=%.9g exp2_poly=%.9g exp2=%.9g rel=%.3g\n", x, got, ref, rel); }
  }
}

void check_tiny(float x) {
  const float got = exp2_poly(x);
  ++g_checked;
  if (!(got >= 0.f && got <= std::ldexp(1.f, -125))) {
    if (++g_failures <= 20) { std::printf("FAIL x=%.9g exp2_poly=%.9g, expected a value in [0, 2^-125]\n", x, got); }
  }
}
}  // namespace

int main() {
  for (double x = -125.5; x <= 4.0; x += 1.0 / 4096) {
    const float xf = static_cast<float>(x);
    check_rel(xf);
    if (xf > -125.5f) { check_rel(std::nextafter(xf, -INFINITY)); }
    check_rel(std::nextafter(xf, INFINITY));
  }
  for (int n = -125; n <= 4; ++n) { check_rel(static_cast<float>(n)); }
  for (double x = -1000.0; x < -125.5; x += 0.37) { check_tiny(static_cast<float>(x)); }
  check_tiny(-INFINITY);
  check_tiny(-FLT_MAX);
  check_tiny(std::nextafter(-125.5f, -INFINITY));
  std::printf("checked %ld values, worst relative error %.3g at x=%.9g, %ld failures\n", g_checked, g_worst,
              g_worst_x, g_failures);
  return g_failures == 0 ? 0 : 1;
}
