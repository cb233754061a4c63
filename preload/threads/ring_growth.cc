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

// Spares: mapped by the flush thread, taken (exchanged for null) by a
// thread whose ring is full. g_spare_bytes is written before the first
// spare is published (release) and never changes.
std::atomic<uint8_t*> g_spares[kSpareRings];
std::atomic<size_t> g_spare_bytes{0};
bool g_spare_mapped[kSpareRings];     // flush thread: slot i held a spare at its last look
uint8_t* g_spare_given[kSpareRings];  // flush thread: what it put in slot i
uint8_t* g_spare_taken[kSpareRings];  // flush thread: taken spares whose thread is not yet logged

size_t GrownBytes(size_t base) {
  return base * kGrowthFactor < kGrownRingMaxBytes ? base * kGrowthFactor : kGrownRingMaxBytes;
}

// Flush thread: a spare that was taken now belongs to its thread's ring
// (counted among the grown, released with it); replace it while the cap
// allows.
void RefillSpares(size_t base) {
  size_t bytes = g_spare_bytes.load(std::memory_order_relaxed);
  if (bytes == 0) {
    if (GrownBytes(base) <= base) return;  // rings this big do not grow
    bytes = GrownBytes(base);
    g_spare_bytes.store(bytes, std::memory_order_relaxed);  // the spares' release stores publish it
  }
  int mapped = 0;
  for (int i = 0; i < kSpareRings; ++i) {
    const bool present = g_spares[i].load(std::memory_order_acquire) != nullptr;
    if (g_spare_mapped[i] && !present) {
      g_grown.fetch_add(1, std::memory_order_relaxed);
      g_spare_taken[i] = g_spare_given[i];
    }
    g_spare_mapped[i] = present;
    mapped += present;
  }
  for (int i = 0; i < kSpareRings; ++i) {
    if (g_spare_mapped[i] || g_grown.load(std::memory_order_relaxed) + mapped >= kMaxGrownRings) continue;
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) return;
    g_spare_given[i] = static_cast<uint8_t*>(mem);
    g_spares[i].store(static_cast<uint8_t*>(mem), std::memory_order_release);
    g_spare_mapped[i] = true;
    ++mapped;
  }
}

void Unmap(ThreadState* ts) {
  uint8_t* buf = ts->ring.offered_buffer();
  if (buf == nullptr) return;
  munmap(buf, ts->ring.offered_capacity());
  g_grown.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace

void PrepareSpareRings(size_t base_ring_bytes) { RefillSpares(base_ring_bytes); }

void NoteRingDrained(ThreadState* ts, uint64_t drained, uint64_t now_ns) {
  ts->ring_window_bytes += drained;
  // The thread writes only its grown ring now, and this thread has read the
  // base one to its end: nothing touches the base again until the slot is
  // reset. Its pages (written whole once it wrapped: 256 KiB at the default)
  // go back to the kernel, and a later reset finds them zero-filled again.
  if (!ts->ring_base_released) {
    if (uint8_t* base = ts->ring.left_base_buffer()) {
      madvise(base, ts->ring.capacity(), MADV_DONTNEED);
      ts->ring_base_released = true;
    }
  }
  const size_t base = ts->ring.capacity();
  RefillSpares(base);
  for (int i = 0; i < kSpareRings; ++i) {
    if (g_spare_taken[i] != nullptr && g_spare_taken[i] == ts->ring.offered_buffer()) {
      g_spare_taken[i] = nullptr;
      Log(LogLevel::kDebug, "thread %d found its ring full: its ring grows to %zu KiB (a spare)", ts->tid,
          ts->ring.offered_capacity() >> 10);
    }
  }
  // A burst: one drain found the ring at least half full (the producer nudges
  // at a quarter, so the drainer fell behind, and the next burst may drop).
  // Grow now rather than at the end of the window: a thread that allocates in
  // a tight loop fills a ring in milliseconds.
  const bool burst = drained * kBurstFraction >= base;
  if (!burst && now_ns - ts->ring_window_start_ns < kWindowNs) return;
  const uint64_t bytes = ts->ring_window_bytes;
  ts->ring_window_start_ns = now_ns;
  ts->ring_window_bytes = 0;
  const size_t grown = GrownBytes(base);
  if ((!burst && bytes < 2 * base) || grown <= base || ts->ring.offered_buffer() != nullptr) return;
  if (g_grown.load(std::memory_order_relaxed) >= kMaxGrownRings) return;
  // Populated here, on the flush thread: the busy thread it is for would
  // otherwise take a page fault on the service's own time for every 4 KiB of
  // its first lap (256 of them for 1 MiB; a paced redis showed them as the
  // socket hooks' page faults).
  void* mem =
      mmap(nullptr, grown, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_POPULATE, -1, 0);
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
  ts->ring_base_released = false;
  ts->ring_window_start_ns = 0;
  ts->ring_window_bytes = 0;
}

bool GrowRingNow(ThreadState* ts) {
  Ring& r = ts->ring;
  const size_t bytes = g_spare_bytes.load(std::memory_order_relaxed);
  if (r.offered_buffer() == nullptr && bytes > r.capacity() && r.ClaimOffer()) {
    uint8_t* spare = nullptr;
    for (int i = 0; i < kSpareRings && spare == nullptr; ++i)
      if (g_spares[i].load(std::memory_order_relaxed) != nullptr)
        spare = g_spares[i].exchange(nullptr, std::memory_order_acq_rel);
    if (spare == nullptr) {
      r.UnclaimOffer();
      return false;
    }
    r.PublishOffer(spare, bytes);
  }
  return r.GrowNow();
}

int GrownRings() { return g_grown.load(std::memory_order_relaxed); }

}  // namespace flightrec
