// Unit tests for CpuCredit (sampler/cpu_credit.h): a thread's perf samples
// claim at most the CPU time it had.
#include <doctest/doctest.h>

#include "sampler/cpu_credit.h"

using flightrec::sampler::CpuCredit;

namespace {
constexpr uint64_t kMs = 1000000;
constexpr uint64_t kPeriod = 10 * kMs;  // 100 Hz
}  // namespace

TEST_CASE("cpu credit: samples within the CPU time keep their periods") {
  CpuCredit c;
  CHECK(c.Take(5 * kMs, 10 * kMs, kPeriod) == 1.0);  // first batch: nothing to compare with
  CHECK(c.Take(105 * kMs, 100 * kMs, kPeriod) == 1.0);
  // A batch that lags its drain by most of a period is covered by the carry.
  CHECK(c.Take(200 * kMs, 90 * kMs, kPeriod) == 1.0);
  CHECK(c.Take(290 * kMs, 100 * kMs, kPeriod) == 1.0);
}

TEST_CASE("cpu credit: samples beyond the CPU time (steal) are scaled down to it") {
  CpuCredit c;
  c.Take(100 * kMs, 0, kPeriod);
  // 150 ms sampled while the thread had 100 ms of CPU: 100 ms + 10 ms carry.
  const double f = c.Take(200 * kMs, 150 * kMs, kPeriod);
  CHECK(f == doctest::Approx(110.0 / 150.0));
  // Nothing left over: the next batch gets only what the thread gains.
  CHECK(c.Take(250 * kMs, 100 * kMs, kPeriod) == doctest::Approx(0.5));
}

TEST_CASE("cpu credit: time the samples missed is not saved up to cover later excess") {
  CpuCredit c;
  c.Take(1 * kMs, 0, kPeriod);
  // A second of CPU with only 100 ms sampled (kernel time perf could not see).
  CHECK(c.Take(1001 * kMs, 100 * kMs, kPeriod) == 1.0);
  // Then 200 ms sampled for 100 ms of CPU: scaled to 100 ms + one period, not
  // paid from the 900 ms missed before.
  CHECK(c.Take(1101 * kMs, 200 * kMs, kPeriod) == doctest::Approx(110.0 / 200.0));
}
