// TSC clock unit tests (prefix "tsc clock"): the TSC -> CLOCK_MONOTONIC
// map the flush thread converts socket records with (preload/runtime/tsc_clock.h),
// fed with synthetic pairs, and the real pair reader on this machine.
#include <cpuid.h>
#include <doctest/doctest.h>

#include <time.h>

#include <cstdint>

#include "preload/runtime/clock.h"
#include "preload/runtime/tsc_clock.h"

using flightrec::tscclock::Pair;
using flightrec::tscclock::TscMap;

namespace {

constexpr uint64_t kSec = 1000000000ull;

// A TSC at 2.5 GHz (0.4 ns per tick) that read 1e12 when the monotonic clock read 5 s.
constexpr uint64_t kTsc0 = 1000000000000ull;
constexpr uint64_t kNs0 = 5 * kSec;
Pair At(uint64_t ns_after) { return Pair{kTsc0 + ns_after * 5 / 2, kNs0 + ns_after}; }

int64_t Diff(uint64_t a, uint64_t b) { return static_cast<int64_t>(a - b); }

}  // namespace

TEST_CASE("tsc clock: two pairs give the rate; ticks between and after them convert to ns") {
  TscMap m;
  CHECK(m.empty());
  CHECK(m.AddPair(At(0)));
  CHECK(m.AddPair(At(5000000)));  // 5 ms later (one flush tick)
  CHECK(m.slope() == doctest::Approx(0.4).epsilon(1e-9));
  CHECK(m.ToNs(At(0).tsc) == kNs0);
  CHECK(m.ToNs(At(1234567).tsc) == kNs0 + 1234567);
  CHECK(m.ToNs(At(5000000).tsc) == kNs0 + 5000000);
  // Extrapolated past the last pair (records committed after it was taken).
  CHECK(m.ToNs(At(7000001).tsc) == kNs0 + 7000001);
  // A duration is the difference of two conversions: 2500 ticks = 1000 ns.
  CHECK(m.ToNs(At(3000000).tsc + 2500) - m.ToNs(At(3000000).tsc) == 1000);
}

TEST_CASE("tsc clock: no rate from pairs under 2 ms apart, whose read jitter would make it wrong") {
  TscMap m;
  REQUIRE(m.AddPair(At(0)));
  Pair close = At(5000);  // 5 us later, 40 ns of jitter: a rate 0.8% off
  close.ns += 40;
  REQUIRE(m.AddPair(close));
  CHECK(m.slope() == 0);
  // The next pair far enough from the first gives the rate.
  REQUIRE(m.AddPair(At(3000000)));
  CHECK(m.slope() == doctest::Approx(0.4).epsilon(1e-4));
  // And a second later the map still agrees with the clock.
  CHECK(m.AddPair(At(1003000000)));
}

TEST_CASE("tsc clock: a map started with a known rate (a fork child's) converts from its first pair") {
  TscMap m;
  m.StartWithSlope(At(0), 0.4);
  CHECK(m.ToNs(At(1234567).tsc) == kNs0 + 1234567);
  // Its own pairs take over once they are far enough apart.
  REQUIRE(m.AddPair(At(1000)));
  CHECK(m.slope() == doctest::Approx(0.4));
  REQUIRE(m.AddPair(At(10000000)));
  CHECK(m.ToNs(At(12000000).tsc) == kNs0 + 12000000);
}

TEST_CASE("tsc clock: a pair that contradicts the map is refused and the map kept") {
  TscMap m;
  REQUIRE(m.AddPair(At(0)));
  REQUIRE(m.AddPair(At(10 * 1000000)));
  // 20 ms later the monotonic clock is 2 ms away from what the TSC says: a jump.
  Pair bad = At(30 * 1000000);
  bad.ns += 2000000;
  CHECK_FALSE(m.AddPair(bad));
  CHECK(m.ToNs(At(20 * 1000000).tsc) == kNs0 + 20 * 1000000);
  // A TSC that went backwards is refused too.
  Pair back = At(5 * 1000000);
  back.ns = kNs0 + 40 * 1000000;
  CHECK_FALSE(m.AddPair(back));
  // Within tolerance (NTP slewing, read jitter): accepted.
  Pair slewed = At(1 * kSec);
  slewed.ns += 300000;  // 300 us over 1 s: 300 ppm
  CHECK(m.AddPair(slewed));
}

TEST_CASE("tsc clock: the rate follows a clock that changes speed (rebased every 30-60 s)") {
  TscMap m;
  uint64_t tsc = kTsc0, ns = kNs0;
  REQUIRE(m.AddPair(Pair{tsc, ns}));
  // 100 s at 0.4 ns/tick, pairs every second...
  for (int i = 0; i < 100; ++i) {
    tsc += 2500000000ull;
    ns += kSec;
    REQUIRE(m.AddPair(Pair{tsc, ns}));
  }
  CHECK(m.slope() == doctest::Approx(0.4).epsilon(1e-9));
  // ...then the monotonic clock runs 200 ppm faster (slewed) for 100 s.
  for (int i = 0; i < 100; ++i) {
    tsc += 2500000000ull;
    ns += kSec + 200000;
    REQUIRE(m.AddPair(Pair{tsc, ns}));
  }
  CHECK(m.slope() == doctest::Approx(0.4 * 1.0002).epsilon(1e-7));
  // Half a second after the last pair the conversion is within a few ns.
  CHECK(std::llabs(Diff(m.ToNs(tsc + 1250000000ull), ns + 500100000)) < 5);
}

TEST_CASE("tsc clock: large tick counts do not overflow; times before the first pair stay positive") {
  TscMap m;
  const Pair a{uint64_t{1} << 62, 100 * kSec};
  REQUIRE(m.AddPair(a));
  REQUIRE(m.AddPair(Pair{a.tsc + 2500000000ull, a.ns + kSec}));
  // An hour beyond the last pair: 9e12 ticks * 2^32 overflows 64 bits.
  const uint64_t hour_ticks = 3600ull * 2500000000ull;
  CHECK(Diff(m.ToNs(a.tsc + 2500000000ull + hour_ticks), a.ns + kSec + 3600 * kSec) == 0);
  // Far before the first pair: clamped to 1, never wrapped to a huge time.
  CHECK(m.ToNs(a.tsc - (uint64_t{1} << 50)) == 1);
}

TEST_CASE("tsc clock: the invariant-TSC answer agrees with the CPUID instruction") {
  // CpuHasInvariantTsc reads glibc's copy of the CPUID bits (no trap to a
  // hypervisor per process); the instruction itself must agree.
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool raw = __get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u &&
                   __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
  CHECK(flightrec::tscclock::CpuHasInvariantTsc() == raw);
}

TEST_CASE("tsc clock: pairs read on this machine map the TSC onto CLOCK_MONOTONIC") {
  if (!flightrec::tscclock::CpuHasInvariantTsc()) {
    MESSAGE("no invariant TSC here: the hooks use clock_gettime, nothing to check");
    return;
  }
  TscMap m;
  REQUIRE(m.AddPair(flightrec::tscclock::ReadPair()));
  const uint64_t until = flightrec::MonotonicNs() + 20000000;  // 20 ms apart
  while (flightrec::MonotonicNs() < until) {}
  REQUIRE(m.AddPair(flightrec::tscclock::ReadPair()));
  CHECK(m.slope() > 0.05);  // < 20 GHz
  CHECK(m.slope() < 5.0);   // > 200 MHz
  // A fresh reading converts to within 50 us of the clock read next to it
  // (generous: the machine is shared and this thread can be preempted).
  const uint64_t before = flightrec::MonotonicNs();
  const uint64_t converted = m.ToNs(__rdtsc());
  const uint64_t after = flightrec::MonotonicNs();
  CHECK(converted + 50000 >= before);
  CHECK(converted <= after + 50000);
}

TEST_CASE("tsc clock: the hooks read ticks only once the TSC is calibrated; before, CLOCK_MONOTONIC") {
  namespace sc = flightrec::tscclock;
  // The word's three states: off, on but uncalibrated, a threshold in ticks.
  CHECK_FALSE(sc::HooksReadTsc(0));
  CHECK_FALSE(sc::HooksReadTsc(UINT64_MAX));
  CHECK(sc::HooksReadTsc(1));
  CHECK(sc::HooksReadTsc(UINT64_MAX - 1));
  if (!sc::CpuHasInvariantTsc()) return;  // the hooks read clock_gettime then: nothing to calibrate
  const uint64_t saved_word = sc::g_tsc_block_ticks.load();
  const uint64_t saved_q32 = sc::g_ns_per_tick_q32.load();
  const uint64_t saved_min = sc::g_block_min_ns.load();
  sc::SetBlockMinNs(1000000);  // 1 ms
  REQUIRE(sc::Init(true));
  // Before the flush thread's second pair: a hook reads CLOCK_MONOTONIC, so
  // a thread that blocks right after start is timed, and judged, in ns.
  CHECK(sc::TscWord() == UINT64_MAX);
  CHECK_FALSE(sc::HooksReadTsc(sc::TscWord()));
  CHECK(sc::BlockThreshold(sc::TscWord()) == 1000000u);
  // The flush thread's ticks, 20 ms apart, give the slope: the word becomes
  // 1 ms in ticks and the hooks switch to the TSC.
  const uint64_t first_tick = flightrec::MonotonicNs();
  sc::TicksToNs(__rdtsc(), first_tick);
  const timespec pause{0, 20 * 1000 * 1000};
  nanosleep(&pause, nullptr);
  sc::TicksToNs(__rdtsc(), first_tick + 1);
  const uint64_t word = sc::TscWord();
  CHECK(sc::HooksReadTsc(word));
  CHECK(sc::BlockThreshold(word) == word);
  CHECK(word > 200000u);    // 1 ms at more than 200 MHz
  CHECK(word < 20000000u);  // and less than 20 GHz
  const uint64_t one_ms = sc::ApproxTicksToNs(word);
  CHECK(one_ms > 990000u);
  CHECK(one_ms < 1010000u);
  sc::g_tsc_block_ticks.store(saved_word);
  sc::g_ns_per_tick_q32.store(saved_q32);
  sc::g_block_min_ns.store(saved_min);
  sc::ResetAfterFork();
}

TEST_CASE("tsc clock: a record's times converted in place equal one by one, and a missing time stays 0") {
  namespace sc = flightrec::tscclock;
  if (!sc::CpuHasInvariantTsc()) return;
  const uint64_t saved_word = sc::g_tsc_block_ticks.load();
  const uint64_t saved_q32 = sc::g_ns_per_tick_q32.load();
  REQUIRE(sc::Init(true));
  const uint64_t tick = flightrec::MonotonicNs();
  sc::TicksToNs(__rdtsc(), tick);
  const timespec pause{0, 5 * 1000 * 1000};
  nanosleep(&pause, nullptr);
  const uint64_t now = __rdtsc();
  uint64_t times[5] = {now - 3000000, 0, now - 1000, now, 0};
  uint64_t one_by_one[5];
  // The same tick for both: the map does not move between them.
  for (int i = 0; i < 5; ++i) one_by_one[i] = times[i] ? sc::TicksToNs(times[i], tick + 1) : 0;
  sc::TicksToNsInPlace(times, 5, tick + 1);
  for (int i = 0; i < 5; ++i) CHECK(times[i] == one_by_one[i]);
  CHECK(times[1] == 0);
  CHECK(times[4] == 0);
  CHECK(times[0] < times[2]);
  CHECK(times[2] <= times[3]);
  sc::g_tsc_block_ticks.store(saved_word);
  sc::g_ns_per_tick_q32.store(saved_q32);
  sc::ResetAfterFork();
}
