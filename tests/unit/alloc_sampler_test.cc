// Unit tests for the Poisson allocation sampler (preload/alloc/alloc_sampler.h):
// the gap distribution, and that the countdown as the hooks run it, weighted
// as the reports weigh it, estimates allocated bytes and counts without bias.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "preload/alloc/alloc_sampler.h"
#include "preload/alloc/sample_math.h"

using namespace flightrec::alloc;

TEST_CASE("alloc_sampler: gaps are exponential with the configured mean") {
  uint64_t rng = SeedRandom(1, 2);
  const uint64_t mean = 524288;
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  int below_mean = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t g = DrawGap(&rng, mean);
    REQUIRE(g >= 1);
    sum += static_cast<double>(g);
    sum_sq += static_cast<double>(g) * static_cast<double>(g);
    below_mean += g < static_cast<int64_t>(mean) ? 1 : 0;
  }
  const double m = sum / n;
  const double sd = std::sqrt(sum_sq / n - m * m);
  // Standard error of the mean is mean/sqrt(n) = 0.22%: 2% is ~9 sigma.
  CHECK(m == doctest::Approx(static_cast<double>(mean)).epsilon(0.02));
  CHECK(sd == doctest::Approx(static_cast<double>(mean)).epsilon(0.03));  // exponential: sd == mean
  CHECK(below_mean / static_cast<double>(n) == doctest::Approx(1 - std::exp(-1.0)).epsilon(0.02));
}

// The sampler's own -log(u) and 1 - e^(-x) (no libm in the preload) against
// libm's, over every binade they are used in and the edges.
TEST_CASE("alloc_sampler: NegLogUnit and OneMinusExpNeg agree with libm") {
  using flightrec::alloc::NegLogUnit;
  using flightrec::alloc::OneMinusExpNeg;
  auto close = [](double got, double want) { return got == want || std::fabs(got - want) <= 4e-16 * std::fabs(want); };
  uint64_t z = 12345;
  auto next = [&z] {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    return z;
  };
  int checked = 0;
  for (int binade = -1022; binade <= -1; ++binade) {
    for (int i = 0; i < 200; ++i) {
      const double u = std::ldexp(1.0 + static_cast<double>(next() >> 12) * 0x1p-52, binade);
      const double want = -std::log(u);
      if (!close(NegLogUnit(u), want)) FAIL_CHECK("NegLogUnit(" << u << ") = " << NegLogUnit(u) << ", libm " << want);
      checked++;
    }
  }
  CHECK(NegLogUnit(1.0) == 0.0);
  CHECK(NegLogUnit(0x1p-53) == doctest::Approx(-std::log(0x1p-53)).epsilon(1e-15));
  CHECK(NegLogUnit(1.0 - 0x1p-53) == doctest::Approx(-std::log1p(-0x1p-53)).epsilon(1e-9));
  for (int binade = -60; binade <= 10; ++binade) {
    for (int i = 0; i < 200; ++i) {
      const double x = std::ldexp(1.0 + static_cast<double>(next() >> 12) * 0x1p-52, binade);
      const double want = -std::expm1(-x);
      if (!close(OneMinusExpNeg(x), want))
        FAIL_CHECK("OneMinusExpNeg(" << x << ") = " << OneMinusExpNeg(x) << ", libm " << want);
      checked++;
    }
  }
  CHECK(OneMinusExpNeg(0.0) == 0.0);
  CHECK(OneMinusExpNeg(0.35) == doctest::Approx(-std::expm1(-0.35)).epsilon(1e-15));
  CHECK(OneMinusExpNeg(745.5) == 1.0);
  CHECK(OneMinusExpNeg(1e300) == 1.0);
  CHECK(checked == 1022 * 200 + 71 * 200);
}

TEST_CASE("alloc_sampler: mean 1 samples every allocation") {
  uint64_t rng = SeedRandom(3, 4);
  CHECK(DrawGap(&rng, 1) == 0);
  int64_t countdown = DrawGap(&rng, 1);
  for (size_t size : {0ul, 1ul, 16ul, 1ul << 20}) {
    CHECK(AllocCountdownExpired(&countdown, size));
    countdown = DrawGap(&rng, 1);
  }
  CHECK(SampleBytesWeight(100, 1) == 100.0);
  CHECK(SampleCountWeight(100, 1) == 1.0);
}

TEST_CASE("alloc_sampler: weights") {
  // Much larger than the mean: always sampled, stands for itself.
  CHECK(SampleBytesWeight(64ull << 20, 524288) == doctest::Approx(64.0 * (1 << 20)));
  CHECK(SampleCountWeight(64ull << 20, 524288) == doctest::Approx(1.0));
  // Much smaller: stands for about `mean` bytes.
  CHECK(SampleBytesWeight(16, 524288) == doctest::Approx(524288.0).epsilon(0.001));
  CHECK(SampleBytesWeight(0, 524288) == 0.0);
}

TEST_CASE("alloc_sampler: huge sizes wrap the countdown instead of overflowing") {
  // Modular arithmetic (no UB): 1000 - (2^64 - 1) == 1001.
  int64_t countdown = 1000;
  CHECK_FALSE(AllocCountdownExpired(&countdown, SIZE_MAX));
  CHECK(countdown == 1001);
  CHECK(AllocCountdownExpired(&countdown, size_t{1} << 63));
  CHECK(countdown < 0);
}

namespace {

struct Estimate {
  double bytes = 0, count = 0;
  uint64_t samples = 0;
};

// Runs `sizes` (repeated `rounds` times) through the countdown exactly as the
// hooks do and weighs the samples exactly as cmd_heap.py does.
Estimate Run(const std::vector<size_t>& sizes, int rounds, uint64_t mean, uint64_t seed) {
  uint64_t rng = SeedRandom(seed, 42);
  int64_t countdown = DrawGap(&rng, mean);
  Estimate e;
  for (int r = 0; r < rounds; ++r) {
    for (size_t s : sizes) {
      if (AllocCountdownExpired(&countdown, s)) {
        countdown = DrawGap(&rng, mean);
        e.bytes += SampleBytesWeight(s, mean);
        e.count += SampleCountWeight(s, mean);
        e.samples++;
      }
    }
  }
  return e;
}

}  // namespace

TEST_CASE("alloc_sampler: a mixed stream's byte estimate is unbiased at the default mean") {
  const uint64_t mean = 524288;
  const std::vector<size_t> sizes = {16, 24, 64, 100, 1000, 4096, 65536, 200000, 1 << 20, 8 << 20};
  double true_bytes_per_round = 0;
  for (size_t s : sizes) true_bytes_per_round += static_cast<double>(s);
  const int rounds = 20000;  // ~190 GB simulated, ~360k samples
  const double truth = true_bytes_per_round * rounds;
  for (int seed = 1; seed <= 4; ++seed) {
    const Estimate e = Run(sizes, rounds, mean, static_cast<uint64_t>(seed));
    CHECK(e.bytes == doctest::Approx(truth).epsilon(0.01));
  }
}

TEST_CASE("alloc_sampler: bytes and counts are unbiased for every size class") {
  // A small mean keeps the run short while covering p(sample) from 0.4% to
  // ~1. Each class gets ~20000 samples: sd <= 0.7%, so 3% is > 4 sigma.
  const uint64_t mean = 4096;
  for (size_t size : {16ul, 100ul, 1000ul, 4096ul, 20000ul, 100000ul}) {
    const double p = -std::expm1(-static_cast<double>(size) / mean);
    const int n = static_cast<int>(20000 / p);
    const Estimate e = Run({size}, n, mean, size);
    INFO("size " << size << " samples " << e.samples);
    CHECK(e.bytes == doctest::Approx(static_cast<double>(size) * n).epsilon(0.03));
    CHECK(e.count == doctest::Approx(static_cast<double>(n)).epsilon(0.03));
  }
}
