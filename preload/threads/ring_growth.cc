// Ring growth (see ring_growth.h).
#include "preload/threads/ring_growth.h"

#include <sys/mman.h>

#include <atomic>

#include "preload/runtime/log.h"
#include "preload/threads/thread_registry.h"

namespace flightrec {
namespace {

constexpr uint64_t kWindowNs = 1000 * 1000 * 1000;
constexpr uint64_t kBurstFraction = 2;  // a drain of at least 1/2 ring is a burst

std::atomic<int> g_grown{0};

void Unmap(ThreadState* ts) {
  uint8_t* buf = ts->ring.offered_buffer();
  if (buf == nullptr) return;
  munmap(buf, ts->ring.offered_capacity());
  g_grown.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace

void NoteRingDrained(ThreadState* ts, uint64_t drained, uint64_t now_ns) {
  ts->ring_window_bytes += drained;
  const size_t base = ts->ring.capacity();
  // A burst: one drain found the ring at least half full (the producer nudges
  // at a quarter, so the drainer fell behind, and the next burst may drop).
  // Grow now rather than at the end of the window: a thread that allocates in
  // a tight loop fills a ring in milliseconds.
  const bool burst = drained * kBurstFraction >= base;
  if (!burst && now_ns - ts->ring_window_start_ns < kWindowNs) return;
  const uint64_t bytes = ts->ring_window_bytes;
  ts->ring_window_start_ns = now_ns;
  ts->ring_window_bytes = 0;
  const size_t grown = base * kGrowthFactor < kGrownRingMaxBytes ? base * kGrowthFactor : kGrownRingMaxBytes;
  if ((!burst && bytes < 2 * base) || grown <= base || ts->ring.offered_buffer() != nullptr) return;
  if (g_grown.load(std::memory_order_relaxed) >= kMaxGrownRings) return;
  void* mem = mmap(nullptr, grown, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return;  // no memory to spare: the thread keeps its ring
  if (!ts->ring.OfferGrowth(static_cast<uint8_t*>(mem), grown)) {
    munmap(mem, grown);
    return;
  }
  g_grown.fetch_add(1, std::memory_order_relaxed);
  Log(LogLevel::kDebug, "thread %d wrote %llu KiB of records %s: its ring grows to %zu KiB", ts->tid,
      static_cast<unsigned long long>((burst ? drained : bytes) >> 10), burst ? "in one drain" : "in a second",
      grown >> 10);
}

void ReleaseRingGrowth(ThreadState* ts) {
  Unmap(ts);
  ts->ring.Reset();  // drops the offer: the buffer is gone
  ts->ring_window_start_ns = 0;
  ts->ring_window_bytes = 0;
}

int GrownRings() { return g_grown.load(std::memory_order_relaxed); }

}  // namespace flightrec
