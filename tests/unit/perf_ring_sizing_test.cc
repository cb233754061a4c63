// Unit tests for sampler/ring_sizing.h: the perf ring plan keeps its promise
// (after the kernel's wake-up, the rest of the ring holds the starvation
// budget of samples at the configured rate), stays a power of two, respects
// its cap and never goes below one sample; and the figures per thread that
// docs/LIMITS.md quotes for the defaults.
#include <doctest/doctest.h>

#include <algorithm>

#include "sampler/ring_sizing.h"

using flightrec::sampler::PlanRing;
using flightrec::sampler::RingFillNs;
using flightrec::sampler::RingInputs;
using flightrec::sampler::RingPlan;

namespace {

// A record with a 16 KiB stack copy and 17 registers, as perf_sampler asks.
constexpr size_t kSample = 8 + 8 * 8 + 8 * 17 + 16384;

RingInputs Inputs(uint64_t hz, bool offcpu, size_t stack = 16384) {
  return RingInputs{
      8 + 8 * 8 + 8 * 17 + stack, hz, offcpu ? 50u : 0u, offcpu ? (48u << 10) : 0u, 250'000'000ull, 4096, 4u << 20};
}

bool IsPow2(size_t v) { return v && !(v & (v - 1)); }

// Samples a thread at `hz` (plus `sw` switch samples a second) writes in
// budget_ns, as record bytes, with the SWITCH-record room on top.
size_t BytesIn(uint64_t budget_ns, uint64_t hz, uint64_t sw, size_t sample, size_t room) {
  const uint64_t n =
      (budget_ns * hz + 999'999'999) / 1'000'000'000 + (sw ? (budget_ns * sw + 999'999'999) / 1'000'000'000 : 0);
  return n * sample + room;
}

}  // namespace

TEST_CASE("perf ring: after the wake-up the ring holds 250 ms of samples at the rate asked for") {
  for (uint64_t hz : {49u, 99u, 199u, 499u, 999u}) {
    for (bool offcpu : {false, true}) {
      CAPTURE(hz);
      CAPTURE(offcpu);
      const RingInputs in = Inputs(hz, offcpu);
      const RingPlan p = PlanRing(in);
      CHECK(IsPow2(p.data_pages));
      CHECK(p.data_pages >= p.min_pages);
      const size_t ring = p.data_pages * in.page;
      CHECK(p.watermark_bytes >= kSample);  // never woken for less than one sample
      CHECK(p.watermark_bytes <= ring / 4);
      if (ring <= in.max_ring_bytes / 2) {
        // Not at the cap: the budget fits behind the watermark.
        CHECK(ring - p.watermark_bytes >= BytesIn(in.budget_ns, hz, in.switch_per_sec, kSample, in.switch_record_room));
        // And the plan is the smallest power of two that does it.
        CHECK(ring / 2 < p.budget_bytes + std::max(kSample, p.budget_bytes / 8));
      }
      CHECK(ring <= in.max_ring_bytes);
    }
  }
}

TEST_CASE("perf ring: the default rates' figures per thread") {
  // 99 Hz (FLIGHTREC_CPU_HZ's default), off-CPU on: 1 MiB (was 128 KiB for ~30 ms).
  CHECK(PlanRing(Inputs(99, true)).data_pages * 4096 == (1u << 20));
  // 499 Hz: 4 MiB, the cap (was 512 KiB).
  const RingPlan p499 = PlanRing(Inputs(499, true));
  CHECK(p499.data_pages * 4096 == (4u << 20));
  CHECK((4u << 20) - p499.watermark_bytes >= BytesIn(250'000'000, 499, 50, kSample, 48u << 10));
  // A 4 KiB stack copy needs a quarter of that.
  CHECK(PlanRing(Inputs(499, true, 4096)).data_pages * 4096 == (1u << 20));
}

TEST_CASE("perf ring: the cap wins over the budget, one sample is the floor") {
  RingInputs in = Inputs(10000, true);
  RingPlan p = PlanRing(in);
  CHECK(p.data_pages * 4096 == in.max_ring_bytes);
  CHECK(p.watermark_bytes == in.max_ring_bytes / 8);  // cannot hold the budget: wake early
  // A cap that is not a power of two of pages: the power of two below it.
  in.max_ring_bytes = 3u << 20;
  CHECK(PlanRing(in).data_pages * 4096 == (2u << 20));
  // A cap under one sample: one sample anyway (the kernel refuses less).
  in.max_ring_bytes = 4096;
  p = PlanRing(in);
  CHECK(p.data_pages == p.min_pages);
  CHECK(p.min_pages * 4096 >= in.sample_bytes);
  CHECK(p.watermark_bytes == in.sample_bytes);
}

TEST_CASE("perf ring: fill time of half the 499 Hz ring is past the budget") {
  const RingPlan p = PlanRing(Inputs(499, true));
  const uint64_t half = RingFillNs(kSample, 549, p.data_pages * 4096 / 2);
  CHECK(half >= 200'000'000ull);
  CHECK(half <= 250'000'000ull);
}

TEST_CASE("sigprof ring: past the quarter-full wake-up it holds 250 ms of full-size records") {
  using flightrec::sampler::SigprofRingBytes;
  constexpr size_t kRecord = 16384 + 200;  // a 16 KiB stack copy and the record around it
  for (uint64_t hz : {1u, 49u, 99u, 199u, 499u, 999u}) {
    CAPTURE(hz);
    const size_t ring = SigprofRingBytes(kRecord, hz, 250'000'000, 4u << 20);
    CHECK(IsPow2(ring));
    CHECK(ring >= 4 * kRecord);  // Ring::Reserve: one record may take half
    if (ring < (4u << 20)) {
      CHECK(ring / 4 * 3 >= BytesIn(250'000'000, hz, 0, kRecord, 0));
      if (ring > (128u << 10)) CHECK(ring / 2 / 4 * 3 < BytesIn(250'000'000, hz, 0, kRecord, 0));  // no bigger
    }
    CHECK(ring <= (4u << 20));
  }
  // The default rate: 1 MiB (it was 128 KiB, four records, whatever the
  // rate); 499 Hz: the 4 MiB cap.
  CHECK(SigprofRingBytes(kRecord, 99, 250'000'000, 4u << 20) == (1u << 20));
  CHECK(SigprofRingBytes(kRecord, 499, 250'000'000, 4u << 20) == (4u << 20));
  // Four records are the floor, also under a cap below them.
  CHECK(SigprofRingBytes(kRecord, 1, 1, 0) == (128u << 10));
  CHECK(SigprofRingBytes(kRecord, 10000, 250'000'000, 4096) == (128u << 10));
  CHECK(SigprofRingBytes(1000, 1, 1, 0) == (64u << 10));
}
