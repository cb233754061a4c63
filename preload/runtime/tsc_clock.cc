// TSC clock (see tsc_clock.h): TSC detection, calibration pairs and the
// tsc -> CLOCK_MONOTONIC map.
#include "preload/runtime/tsc_clock.h"

#include "format/cpu_features.h"
#include "preload/runtime/hot_data.h"
#include "preload/runtime/log.h"

namespace flightrec::tscclock {

// First in the hot section (this object links first: preload/runtime/ sorts
// before preload/sockets/), line-aligned: with the socket hooks' TLS offset,
// exchange slots, fd table's pointer and size and prefix buffers it fills
// one cache line (hot_data.h; nm shows the layout).

FR_HOT_DATA alignas(64) std::atomic<uint64_t> g_tsc_block_ticks{0};
std::atomic<uint64_t> g_block_min_ns{UINT64_MAX};
std::atomic<uint64_t> g_ns_per_tick_q32{0};
std::atomic<uint64_t> g_open_bound_ns{UINT64_MAX};
std::atomic<uint64_t> g_open_bound_ticks{UINT64_MAX};

namespace {
constexpr uint64_t kRefreshNs = 1000ull * 1000 * 1000;
constexpr double kQ32One = 4294967296.0;  // 1.0 in g_ns_per_tick_q32's 32.32 fixed point

TscMap g_map;
uint64_t g_pair_tick_ns = 0;  // FlushContext::now_ns of the tick that took the last pair
uint64_t g_last_refresh_ns = 0;
bool g_disagreement_logged = false;

// The TSC side of the block threshold, from the map's current slope.
void PublishBlockTicks() {
  const double slope = g_map.slope();
  const uint64_t min_ns = g_block_min_ns.load(std::memory_order_relaxed);
  if (slope <= 0) return;
  g_ns_per_tick_q32.store(static_cast<uint64_t>(slope * kQ32One), std::memory_order_relaxed);
  // Neither 0 ("TSC off") nor UINT64_MAX ("not calibrated"): a threshold too
  // big to reach stays one below it.
  const double want = min_ns == UINT64_MAX ? 1.8e19 : static_cast<double>(min_ns) / slope;
  uint64_t ticks = want >= 1.8e19 ? UINT64_MAX - 1 : static_cast<uint64_t>(want);
  if (ticks == 0) ticks = 1;
  const uint64_t bound_ns = g_open_bound_ns.load(std::memory_order_relaxed);
  const double bound = bound_ns == UINT64_MAX ? 1.8e19 : static_cast<double>(bound_ns) / slope;
  g_open_bound_ticks.store(bound >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(bound), std::memory_order_relaxed);
  // Only while the TSC is on: never turns it back on after a disagreement.
  uint64_t word = g_tsc_block_ticks.load(std::memory_order_relaxed);
  // Release: a hook that reads these ticks also reads the ns-per-tick above.
  while (word != 0 &&
         !g_tsc_block_ticks.compare_exchange_weak(word, ticks, std::memory_order_release, std::memory_order_relaxed)) {}
}

void AddPairChecked() {
  const Pair p = ReadPair();
  if (g_map.AddPair(p)) {
    PublishBlockTicks();
    return;
  }
  g_tsc_block_ticks.store(0, std::memory_order_relaxed);
  LogOnce(&g_disagreement_logged, LogLevel::kWarn,
          "the TSC disagrees with CLOCK_MONOTONIC; socket hooks use clock_gettime from now on");
}
}  // namespace

void SetBlockMinNs(uint64_t min_ns) { g_block_min_ns.store(min_ns ? min_ns : 1, std::memory_order_relaxed); }

void SetOpenBoundNs(uint64_t bound_ns) { g_open_bound_ns.store(bound_ns ? bound_ns : 1, std::memory_order_relaxed); }

// format/cpu_features.h: glibc's copy of the bits, not four CPUIDs per process.
bool CpuHasInvariantTsc() { return cpu::HasInvariantTsc(); }

bool Init(bool allowed) {
  const bool tsc = allowed && CpuHasInvariantTsc();
  if (tsc) {
    g_map = TscMap();
    g_map.AddPair(ReadPair());
  }
  // Threshold unknown until the flush thread's second pair gives a slope;
  // the hooks read CLOCK_MONOTONIC until then (HooksReadTsc).
  g_tsc_block_ticks.store(tsc ? UINT64_MAX : 0, std::memory_order_relaxed);
  return tsc;
}

Pair ReadPair() {
  Pair best;
  uint64_t best_gap = UINT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const uint64_t a = __rdtsc();
    const uint64_t ns = MonotonicNs();
    const uint64_t b = __rdtsc();
    if (b >= a && b - a < best_gap) {
      best_gap = b - a;
      best.tsc = a + (b - a) / 2;
      best.ns = ns;
    }
  }
  if (best_gap == UINT64_MAX) best = Pair{__rdtsc(), MonotonicNs()};
  return best;
}

bool TscMap::AddPair(const Pair& p) {
  if (!have_last_) {
    base_ = mid_ = last_ = p;
    have_last_ = true;
    return true;
  }
  if (p.tsc <= last_.tsc || p.ns <= last_.ns) {
    // Same instant (harmless), or a TSC that went backwards (not harmless).
    return p.tsc == last_.tsc || p.tsc > last_.tsc;
  }
  if (slope_ > 0) {
    const uint64_t predicted = ToNs(p.tsc);
    const uint64_t error = predicted > p.ns ? predicted - p.ns : p.ns - predicted;
    if (error > 50000 + (p.ns - last_.ns) / 1000) return false;
  }
  last_ = p;
  if (p.ns - mid_.ns >= kRebaseNs) {
    base_ = mid_;
    mid_ = p;
  }
  if (last_.tsc > base_.tsc && last_.ns >= base_.ns + kMinSlopeSpanNs) {
    slope_ = static_cast<double>(last_.ns - base_.ns) / static_cast<double>(last_.tsc - base_.tsc);
    mult_ = static_cast<uint64_t>(slope_ * kOne + 0.5);
  }
  return true;
}

void TscMap::StartWithSlope(const Pair& p, double slope) {
  *this = TscMap();
  AddPair(p);
  if (slope > 0) {
    slope_ = slope;
    mult_ = static_cast<uint64_t>(slope_ * kOne + 0.5);
  }
}

uint64_t TscMap::ToNs(uint64_t tsc) const {
  // Fixed point (48 fraction bits), as the kernel's clocksources do: under a
  // ns off an hour away from the last pair, and no floating point per record.
  const __int128 ticks = static_cast<int64_t>(tsc - last_.tsc);
  const auto delta = static_cast<int64_t>((ticks * static_cast<__int128>(mult_) + (__int128{1} << 47)) >> 48);
  if (delta < 0 && static_cast<uint64_t>(-delta) >= last_.ns) return 1;
  return last_.ns + static_cast<uint64_t>(delta);
}

// Once per tick: the pair the conversions of this tick use.
void TakeTickPair(uint64_t tick_ns) {
  if (g_map.empty()) g_map.AddPair(ReadPair());
  if (g_pair_tick_ns != tick_ns) {
    g_pair_tick_ns = tick_ns;
    g_last_refresh_ns = tick_ns;
    AddPairChecked();
  }
}

uint64_t TicksToNs(uint64_t tsc, uint64_t tick_ns) {
  TakeTickPair(tick_ns);
  return g_map.ToNs(tsc);
}

void TickSpanToNs(uint64_t start_tsc, uint64_t ticks, uint64_t tick_ns, uint64_t* start_ns, uint64_t* end_ns) {
  TakeTickPair(tick_ns);
  *start_ns = g_map.ToNs(start_tsc);
  *end_ns = g_map.ToNs(start_tsc + ticks);
}

void TicksToNsInPlace(uint64_t* ticks, int n, uint64_t tick_ns) {
  TakeTickPair(tick_ns);
  for (int i = 0; i < n; ++i)
    if (ticks[i]) ticks[i] = g_map.ToNs(ticks[i]);
}

void Refresh(uint64_t now_ns) {
  // Every tick until the map has a slope: the hooks read clock_gettime until
  // then, so there are no ticks to convert that would take pairs.
  if (!UseTsc() || (g_map.slope() > 0 && now_ns - g_last_refresh_ns < kRefreshNs)) return;
  g_last_refresh_ns = now_ns;
  AddPairChecked();
}

void ResetAfterFork() {
  g_map = TscMap();
  // With the parent's rate (an atomic; its map is not: the parent's flush
  // thread may have been updating it at the fork), so the ticks the child's
  // hooks record from its first call convert before its own pairs are 2 ms
  // apart.
  const double slope = static_cast<double>(g_ns_per_tick_q32.load(std::memory_order_relaxed)) / kQ32One;
  if (UseTsc()) g_map.StartWithSlope(ReadPair(), slope);
  g_pair_tick_ns = g_last_refresh_ns = 0;
}

}  // namespace flightrec::tscclock
