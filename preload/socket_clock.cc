// Socket clock (see socket_clock.h): TSC detection, calibration pairs and the
// tsc -> CLOCK_MONOTONIC map.
#include "preload/socket_clock.h"

#include <cpuid.h>


#include "preload/log.h"
#include "preload/socket_hot_data.h"

namespace flightrec::sockclock {

}  // namespace flightrec::sockclock

// First in the hot section (this object links first), line-aligned: with
// the TLS offset, the fd table's pointer and size and the first real
// functions it fills one cache line (socket_hot_data.h; nm shows the layout).
// The offset is socket_hot_path.h's; GCC places a unit's variables in reverse
// order of definition, so it is defined first and lands second.
namespace flightrec::sockhot {
FR_SOCK_HOT_DATA intptr_t g_tls_state_offset = 0;
}  // namespace flightrec::sockhot

namespace flightrec::sockclock {

FR_SOCK_HOT_DATA alignas(64) std::atomic<uint64_t> g_tsc_block_ticks{0};
std::atomic<uint64_t> g_block_min_ns{UINT64_MAX};
std::atomic<uint64_t> g_ns_per_tick_q32{0};

namespace {
constexpr uint64_t kRefreshNs = 1000ull * 1000 * 1000;

// Init's pair, for BlockedTicksToNs before the first calibration.
std::atomic<uint64_t> g_init_tsc{0};
std::atomic<uint64_t> g_init_ns{0};

TscMap g_map;
uint64_t g_pair_tick_ns = 0;  // FlushContext::now_ns of the tick that took the last pair
uint64_t g_last_refresh_ns = 0;
bool g_disagreement_logged = false;

// The TSC side of the block threshold, from the map's current slope.
void PublishBlockTicks() {
  const double slope = g_map.slope();
  const uint64_t min_ns = g_block_min_ns.load(std::memory_order_relaxed);
  if (slope <= 0 || min_ns == UINT64_MAX) return;
  g_ns_per_tick_q32.store(static_cast<uint64_t>(slope * 4294967296.0), std::memory_order_relaxed);
  uint64_t ticks = static_cast<uint64_t>(static_cast<double>(min_ns) / slope);
  if (ticks == 0) ticks = 1;  // 0 would mean "TSC off"
  // Only while the TSC is on: never turns it back on after a disagreement.
  uint64_t word = g_tsc_block_ticks.load(std::memory_order_relaxed);
  while (word != 0 && !g_tsc_block_ticks.compare_exchange_weak(word, ticks, std::memory_order_relaxed)) {
  }
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

uint64_t BlockedTicksToNs(uint64_t ticks, uint64_t now_tsc, uint64_t now_ns) {
  if (g_ns_per_tick_q32.load(std::memory_order_relaxed) != 0) return ApproxTicksToNs(ticks);
  const uint64_t init_tsc = g_init_tsc.load(std::memory_order_acquire);
  const uint64_t init_ns = g_init_ns.load(std::memory_order_relaxed);
  if (init_tsc == 0 || now_tsc <= init_tsc || now_ns <= init_ns) return 0;
  const double ns_per_tick = static_cast<double>(now_ns - init_ns) / static_cast<double>(now_tsc - init_tsc);
  return static_cast<uint64_t>(static_cast<double>(ticks) * ns_per_tick);
}

void SetBlockMinNs(uint64_t min_ns) {
  g_block_min_ns.store(min_ns ? min_ns : 1, std::memory_order_relaxed);
}

bool CpuHasInvariantTsc() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d)) return false;
  return (d & (1u << 8)) != 0;
}

bool Init(bool allowed) {
  const bool tsc = allowed && CpuHasInvariantTsc();
  if (tsc) {
    g_map = TscMap();
    const Pair p = ReadPair();
    g_map.AddPair(p);
    g_init_ns.store(p.ns, std::memory_order_relaxed);
    g_init_tsc.store(p.tsc, std::memory_order_release);
  }
  // Threshold unknown until the flush thread's second pair gives a slope.
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
  if (last_.tsc > base_.tsc && last_.ns > base_.ns) {
    slope_ = static_cast<double>(last_.ns - base_.ns) / static_cast<double>(last_.tsc - base_.tsc);
    mult_ = static_cast<uint64_t>(slope_ * kOne + 0.5);
  }
  return true;
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

void Refresh(uint64_t now_ns) {
  if (!UseTsc() || now_ns - g_last_refresh_ns < kRefreshNs) return;
  g_last_refresh_ns = now_ns;
  AddPairChecked();
}

void ResetAfterFork() {
  g_map = TscMap();
  if (UseTsc()) g_map.AddPair(ReadPair());
  g_pair_tick_ns = g_last_refresh_ns = 0;
}

}  // namespace flightrec::sockclock
