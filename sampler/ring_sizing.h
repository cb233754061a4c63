// Perf ring sizing: how many data pages a thread's perf ring gets and when
// the kernel wakes the sampler thread, from the size of one sample record and
// the rates that fill the ring. Pure arithmetic (no state), so the unit tests
// check the promise directly: with the plan's ring and watermark, a thread
// sampled at the configured rate can go `budget_ns` past the wake-up with
// nobody draining its ring and lose nothing.
//
// Why time and not a fixed share of the ring: the sampler thread runs at nice
// +10, and on a machine whose CPUs are all busy the scheduler keeps it off
// the CPU for tens to hundreds of milliseconds after the kernel woke it (a
// loaded 2-CPU machine lost 152 of 538 samples at 499 Hz with the 30 ms ring
// this replaced). A record reserves the whole stack copy whatever the stack's
// depth (the kernel sizes PERF_SAMPLE_STACK_USER from the stack pointer to
// the top of the address space), so the ring costs record bytes x samples.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace flightrec::sampler {

// How long the collector (nice +10, on a machine whose CPUs are all busy)
// may go unscheduled without a busy thread's ring losing a sample, and the
// most one ring may take: perf's rings and SIGPROF's alike.
inline constexpr uint64_t kRingStarvationBudgetNs = 250'000'000;
inline constexpr size_t kRingMaxBytes = 4u << 20;

struct RingInputs {
  size_t sample_bytes;        // one PERF_RECORD_SAMPLE, stack copy included
  uint64_t cpu_hz;            // CPU samples per second of thread CPU time
  uint64_t switch_per_sec;    // thinned switch-out samples per second (0: none)
  size_t switch_record_room;  // room for SWITCH records (0: none)
  uint64_t budget_ns;         // starvation the ring must ride out after the wake-up
  size_t page;
  size_t max_ring_bytes;  // cap on the data area
};

struct RingPlan {
  size_t min_pages;        // the smallest ring that holds one sample
  size_t data_pages;       // the planned ring (a power of two, >= min_pages)
  size_t budget_bytes;     // what budget_ns of samples takes
  size_t watermark_bytes;  // the kernel wakes the sampler thread after this many
};

inline size_t RingRoundUpPow2(size_t v) {
  size_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Samples that budget_ns at `per_sec` can bring, rounded up, at least one.
inline uint64_t RingSamplesIn(uint64_t budget_ns, uint64_t per_sec) {
  return std::max<uint64_t>(1, (budget_ns * per_sec + 999'999'999ull) / 1'000'000'000ull);
}

inline RingPlan PlanRing(const RingInputs& in) {
  RingPlan p{};
  const size_t page = in.page ? in.page : 4096;
  p.min_pages = RingRoundUpPow2((in.sample_bytes + page - 1) / page);
  const uint64_t samples =
      RingSamplesIn(in.budget_ns, in.cpu_hz) + (in.switch_per_sec ? RingSamplesIn(in.budget_ns, in.switch_per_sec) : 0);
  p.budget_bytes = static_cast<size_t>(samples) * in.sample_bytes + in.switch_record_room;
  // The watermark wants room of its own: at least one sample, about an
  // eighth of the budget, so the sampler thread is woken well before the
  // budget starts to run out.
  const size_t wake = std::max(in.sample_bytes, p.budget_bytes / 8);
  size_t cap_pages = RingRoundUpPow2(std::max<size_t>(1, in.max_ring_bytes / page));
  if (cap_pages * page > in.max_ring_bytes && cap_pages > 1) cap_pages /= 2;  // a power of two under the cap
  const size_t want_pages = RingRoundUpPow2((p.budget_bytes + wake + page - 1) / page);
  p.data_pages = std::max(p.min_pages, std::min(cap_pages, want_pages));
  // The rest of the ring past the watermark holds the budget when it fits:
  // wake at a quarter at most (fewer wake-ups when the power of two left
  // slack), never before one sample is in. A capped ring cannot hold the
  // budget: wake at an eighth (waking at every sample would cost the
  // sampler thread a wake-up per sample).
  const size_t ring = p.data_pages * page;
  const size_t one = std::min(in.sample_bytes, ring);
  if (ring >= p.budget_bytes + in.sample_bytes)
    p.watermark_bytes = std::max(one, std::min(ring / 4, ring - p.budget_bytes));
  else p.watermark_bytes = std::max(one, ring / 8);
  return p;
}

// How long a thread sampled at `per_sec` takes to write `bytes` of samples.
inline uint64_t RingFillNs(size_t sample_bytes, uint64_t per_sec, size_t bytes) {
  const uint64_t samples = std::max<uint64_t>(1, bytes / std::max<size_t>(1, sample_bytes));
  return samples * 1'000'000'000ull / std::max<uint64_t>(1, per_sec);
}

// A SIGPROF timer slot's ring (sigprof_sampler.cc). Its handler writes each
// sample into the ring of the thread it interrupted, and the sampler thread
// drains it; the handler wakes that thread when the ring passes a quarter
// full (Ring::TakeNudge), so the other three quarters must hold `budget_ns`
// of samples at `hz`, each as big as a record can be (`record_bytes`: the
// whole stack copy; most records hold only the live part of the stack, so
// the ring rides out longer in practice). Before the recorder goes live
// the nudge is what starts the sampler thread, which at nice +10 on a busy
// machine can take as long as any later drain. Four records at least (one
// may take half the ring: Ring::Reserve), 64 KiB at least, a power of two,
// at most `max_bytes` unless four records need more. The mapping costs
// address space: a ring rewinds to its front when drained and gives back
// the pages a burst reached (ring.h), so a thread keeps resident only what
// it writes between drains.
inline size_t SigprofRingFloorBytes(size_t record_bytes) {
  return RingRoundUpPow2(std::max<size_t>(64 * 1024, 4 * record_bytes));
}
inline size_t SigprofRingBytes(size_t record_bytes, uint64_t hz, uint64_t budget_ns, size_t max_bytes) {
  const size_t floor = SigprofRingFloorBytes(record_bytes);
  const uint64_t samples = RingSamplesIn(budget_ns, hz);
  const size_t want = RingRoundUpPow2(static_cast<size_t>((samples * record_bytes * 4 + 2) / 3));
  size_t cap = RingRoundUpPow2(std::max<size_t>(1, max_bytes));
  if (cap > max_bytes && cap > 1) cap /= 2;
  return std::max(floor, std::min(want, cap));
}

}  // namespace flightrec::sampler
