// Dropped weight: what sampled records that did not fit a ring stood for.
//
// A sample (a sampled allocation) stands for more than itself: its weight,
// estimated bytes and allocations. When its record finds the thread's ring
// full, the record is lost, but its weight must not be: the owning thread
// adds it here, beside the ring, and the flush thread harvests the growth
// into the trace (alloc.unattributed), so reports carry the exact weight of
// what was dropped as an explicit "[unattributed: ring full]" entry instead
// of estimates that are silently low. Imitates socket_gaps.h, for a sum.
//
// Concurrency: writers are the owning thread and a signal handler that may
// interrupt it, so each counter grows by an atomic fetch_add (lock-free, no
// call; a drop path only, never the unsampled hot path). One reader (the
// flush thread) reports the growth since its last harvest. The three
// counters are not read as one snapshot: a harvest that sees a sample's
// count but not yet its bytes reports the bytes at the next harvest; sums
// over the trace are exact.
#pragma once
#include <atomic>
#include <cstdint>

namespace flightrec {

struct DroppedWeight {
  // Objects are kept in units of 1/kObjectUnit: the estimate 1/p of one
  // sample is fractional (p < 1), and a float cannot be added atomically
  // without a compare-and-swap loop.
  static constexpr double kObjectUnit = 65536.0;

  std::atomic<uint64_t> samples{0};
  std::atomic<uint64_t> bytes{0};    // estimated bytes, rounded per sample
  std::atomic<uint64_t> objects{0};  // estimated objects x kObjectUnit, rounded per sample

  // Flush-thread private: what was reported so far.
  uint64_t samples_reported = 0, bytes_reported = 0, objects_reported = 0;

  // Owner thread (or its signal handler): one dropped sample of this weight.
  void Add(double est_bytes, double est_objects) {
    samples.fetch_add(1, std::memory_order_relaxed);
    bytes.fetch_add(static_cast<uint64_t>(est_bytes + 0.5), std::memory_order_relaxed);
    objects.fetch_add(static_cast<uint64_t>(est_objects * kObjectUnit + 0.5), std::memory_order_relaxed);
  }

  // Flush thread: the growth since the last harvest (zero samples: nothing
  // new), marked reported.
  struct Delta {
    uint64_t samples;
    double bytes, objects;
  };
  Delta Harvest() {
    const uint64_t s = samples.load(std::memory_order_relaxed);
    const uint64_t b = bytes.load(std::memory_order_relaxed);
    const uint64_t o = objects.load(std::memory_order_relaxed);
    Delta d{s - samples_reported, static_cast<double>(b - bytes_reported),
            static_cast<double>(o - objects_reported) / kObjectUnit};
    samples_reported = s;
    bytes_reported = b;
    objects_reported = o;
    return d;
  }
};

// The same for off-CPU samples (blocks) whose records were dropped: how many
// and how long they were (each block's duration is known when it is
// dropped). Harvested into offcpu.unattributed (sampler/sample_events.cc).
struct DroppedTime {
  std::atomic<uint64_t> samples{0};
  std::atomic<uint64_t> ns{0};
  uint64_t samples_reported = 0, ns_reported = 0;  // flush-thread private

  void Add(uint64_t duration_ns) {
    samples.fetch_add(1, std::memory_order_relaxed);
    ns.fetch_add(duration_ns, std::memory_order_relaxed);
  }
  struct Delta {
    uint64_t samples, ns;
  };
  // Flush thread: the growth since the last harvest ({0, 0}: nothing new).
  Delta Harvest() {
    const uint64_t s = samples.load(std::memory_order_relaxed);
    const uint64_t n = ns.load(std::memory_order_relaxed);
    Delta d{s - samples_reported, n - ns_reported};
    samples_reported = s;
    ns_reported = n;
    return d;
  }
};

}  // namespace flightrec
