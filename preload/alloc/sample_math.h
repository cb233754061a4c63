// sample_math: the two transcendental functions allocation sampling needs,
// -log(u) for the exponential gap between samples and 1 - e^(-x) for a
// sample's weight, without libm.
//
// Why not <cmath>: std::log and std::expm1 were the preload's only calls
// into libm, so every process it entered loaded libm.so.6 for them: 8-10
// page faults and its relocations at start (perf stat on /bin/true, which
// does not link libm), paid by every short-lived process (issue #39).
// Both functions below are within a few units in the last place of libm's
// (tests/unit/alloc_sampler_test.cc compares them over their whole range).
//
// Plain arithmetic on doubles: async-signal-safe, no state, no errno.
#pragma once

#include <cstdint>
#include <cstring>

namespace flightrec::alloc {

namespace sample_math_detail {

constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2, high bits (fdlibm's split)
constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi

inline uint64_t Bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
inline double FromBits(uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

// e^r - 1 for |r| <= 0.35: its Taylor series to r^17 (the next term is
// below 2^-60 of the sum), summed from the smallest term up.
inline double ExpM1Small(double r) {
  double sum = 0.0;
  for (int k = 17; k >= 1; --k) sum = (sum + 1.0) * r / k;
  return sum;
}

}  // namespace sample_math_detail

// -ln(u) for u in (0, 1] (a normal double: u >= 2^-1022); 0 for u >= 1.
// u = m 2^e with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s), s = (m-1)/(m+1),
// |s| < 0.172, whose odd series to s^23 is exact to double precision.
inline double NegLogUnit(double u) {
  using namespace sample_math_detail;
  if (!(u < 1.0)) return 0.0;
  if (!(u >= 2.2250738585072014e-308)) u = 2.2250738585072014e-308;  // and NaN: the smallest normal
  const uint64_t b = Bits(u);
  int e = static_cast<int>((b >> 52) & 0x7ff) - 1023;
  double m = FromBits((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1, 2)
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e += 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double series = 0.0;  // 1/3 + s2/5 + s2^2/7 + ... + s2^10/23
  for (int k = 23; k >= 3; k -= 2) series = series * s2 + 1.0 / k;
  const double ln_m = 2.0 * s + 2.0 * s * s2 * series;
  return -(e * kLn2Hi + (e * kLn2Lo + ln_m));
}

// 1 - e^(-x) for x >= 0 (-expm1(-x)), without the cancellation of computing
// e^(-x) first for small x. 1 for x past ~745 (e^(-x) is then 0 in doubles).
inline double OneMinusExpNeg(double x) {
  using namespace sample_math_detail;
  if (!(x > 0.0)) return 0.0;  // and NaN
  if (x <= 0.35) return -ExpM1Small(-x);
  if (x > 745.0) return 1.0;
  // e^(-x) = 2^(-k) e^(-r), x = k ln 2 + r, |r| <= ln 2 / 2.
  const int k = static_cast<int>(x / (kLn2Hi + kLn2Lo) + 0.5);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  const double e_r = 1.0 + ExpM1Small(-r);
  // 2^(-k) as a double: k <= 1075 here; below 2^-1022 the result is so close
  // to 1 that 0 serves (the answer rounds to 1 either way).
  const double two_to_minus_k = k <= 1022 ? FromBits(static_cast<uint64_t>(1023 - k) << 52) : 0.0;
  return 1.0 - e_r * two_to_minus_k;
}

}  // namespace flightrec::alloc
