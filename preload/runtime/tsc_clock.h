// TSC clock: the timestamps the socket hooks and the blocking-call hooks
// (sampler/hook_blocking.cc) take, and their conversion to the trace's time
// base (CLOCK_MONOTONIC ns) on the flush thread. In runtime/ because two
// producers read it; the socket hooks set it up (socket_init.cc) and their
// decoder converts with it.
//
// A recorded call reads the clock twice, around the real call, and those two
// reads were most of a hook's cost: clock_gettime(CLOCK_MONOTONIC) is ~26 ns
// here (vDSO over kvm-clock), rdtsc ~11 ns. So where the TSC is invariant
// (CPUID 0x80000007 EDX bit 8: constant rate, keeps counting in deep
// C-states), the hooks record raw TSC ticks and the flush thread converts
// them with a linear map fitted to (tsc, monotonic) pairs it reads itself,
// once per tick. Elsewhere, or with FLIGHTREC_SOCKET_TSC=0, they read
// CLOCK_MONOTONIC. Every record says which unit it holds
// (kOpFlagTsc), so switching at any moment is safe. The data calls
// (send/recv/read/write families) and the blocking-call hooks
// (hook_blocking.cc: poll, epoll_wait, ...) use it; the rare lifecycle calls
// (socket, connect, accept, close, ...) keep clock_gettime.
//
// Trust, but check: each new pair is compared with what the map predicted.
// A TSC that jumps or drifts (a VM migrated without TSC scaling, sockets
// whose TSCs are not synchronised) shows up as a disagreement; the hooks then
// go back to clock_gettime for good (logged once), and the ticks already
// recorded are still converted by the map as it stood.
//
// Threads: Read* and UseTsc are for any thread (async-signal-safe). TscMap and
// the converter functions are for the flush thread only (it also does the
// final drain at exit).
#pragma once
#include <x86intrin.h>

#include <atomic>
#include <cstdint>

#include "preload/runtime/clock.h"

namespace flightrec::tscclock {

// The TSC switch and the TSC block threshold in one word, so that a recorded
// call reads one hot-line global for both (hot_data.h): 0 = the TSC is
// off; UINT64_MAX = on but not calibrated yet (the flush thread's second pair
// gives the slope); otherwise a call that took at least this many ticks
// blocked. Moves only MAX -> ticks -> ticks' -> 0.
extern std::atomic<uint64_t> g_tsc_block_ticks;

// Acquire: a hook that sees a threshold in ticks also sees the ns-per-tick
// published before it (ApproxTicksToNs). A plain load on x86.
inline uint64_t TscWord() { return g_tsc_block_ticks.load(std::memory_order_acquire); }
// The TSC is on (calibrated or not): the flush thread keeps the map fresh.
inline bool UseTsc() { return TscWord() != 0; }
// The hooks' choice, from their one read of the word: ticks only once
// calibrated; CLOCK_MONOTONIC while the TSC is off and before its first
// calibration. So the block threshold is always known in the unit a hook read,
// and a thread that blocks right after start is timed exactly.
inline bool HooksReadTsc(uint64_t word) { return word - 1 < UINT64_MAX - 1; }
inline uint64_t Read(bool tsc) { return tsc ? __rdtsc() : MonotonicNs(); }

// Blocking socket calls as off-CPU time (with the blocking-call hooks, see
// sampler/offcpu_blocking.h): a recorded call that took at least this long,
// in the unit of the clock the hook read, is offered as a block. The ns
// threshold is set by SetBlockMinNs (init); the ticks one (the TSC word)
// by the flush thread whenever the map's slope changes.
extern std::atomic<uint64_t> g_block_min_ns;
inline uint64_t BlockMinNs() { return g_block_min_ns.load(std::memory_order_relaxed); }
// ns per TSC tick, 32.32 fixed point (0 until known): for the rare blocked
// call's duration on the calling thread, where the map is not available.
extern std::atomic<uint64_t> g_ns_per_tick_q32;
// The threshold for a hook that read `word` before its call: the word itself
// when it read ticks, else the ns one.
inline uint64_t BlockThreshold(uint64_t word) { return HooksReadTsc(word) ? word : BlockMinNs(); }
inline uint64_t ApproxTicksToNs(uint64_t ticks) {
  return static_cast<uint64_t>(
      (static_cast<unsigned __int128>(ticks) * g_ns_per_tick_q32.load(std::memory_order_relaxed)) >> 32);
}
void SetBlockMinNs(uint64_t min_ns);

// How long an exchange's record may stay open in a descriptor's slot before
// the hook writes what it has (socket_exchange.h), in each unit: the ns one
// set at init (SetOpenBoundNs), the ticks one published with the block
// threshold (before it, so a hook that reads ticks reads this too).
extern std::atomic<uint64_t> g_open_bound_ns;
extern std::atomic<uint64_t> g_open_bound_ticks;
inline uint64_t OpenBound(bool tsc) {
  return (tsc ? g_open_bound_ticks : g_open_bound_ns).load(std::memory_order_relaxed);
}
void SetOpenBoundNs(uint64_t bound_ns);

// True when CPUID reports an invariant TSC.
bool CpuHasInvariantTsc();

// At init: turn the TSC on if `allowed` and the CPU has an invariant one;
// takes the first calibration pair. Returns whether the TSC is in use.
bool Init(bool allowed);

// A (tsc, monotonic ns) pair read back to back, the best of a few tries (the
// pair whose two TSC reads are closest, so a preemption in between is never
// taken).
struct Pair {
  uint64_t tsc = 0;
  uint64_t ns = 0;
};
Pair ReadPair();

// Linear map tsc -> ns. Offset from the latest pair, slope from a pair 30-60 s
// older (the first pair until then; none until two pairs are 2 ms apart), so
// it follows NTP's slewing of CLOCK_MONOTONIC. Pure: unit-tested with synthetic pairs.
class TscMap {
 public:
  // Adds a pair. Returns false when the pair disagrees with the map by more
  // than 50 us + 1000 ppm of the time since the previous pair (the TSC is not
  // trustworthy); the map then starts over from this pair.
  bool AddPair(const Pair& p);
  // A map that starts from one pair with a rate already known (a fork
  // child's, from the parent's): ticks convert at once.
  void StartWithSlope(const Pair& p, double slope);
  bool empty() const { return !have_last_; }
  // Monotonic ns of a TSC reading (extrapolated beyond the pairs). Never 0 for
  // a non-empty map.
  uint64_t ToNs(uint64_t tsc) const;
  // ns per tick (0 until two pairs).
  double slope() const { return slope_; }

 private:
  static constexpr uint64_t kRebaseNs = 30ull * 1000 * 1000 * 1000;
  // No slope from pairs closer than this: ~20 ns of read jitter over 2 ms is
  // 10 ppm, well inside the disagreement test's 1000 ppm; over the few us
  // between Init's pair and an early first tick it would fail that test a
  // second later and turn the TSC off for good.
  static constexpr uint64_t kMinSlopeSpanNs = 2ull * 1000 * 1000;
  static constexpr double kOne = 281474976710656.0;  // 2^48: mult_ is ns per tick in 16.48 fixed point
  Pair base_, mid_, last_;
  double slope_ = 0;
  uint64_t mult_ = 0;
  bool have_last_ = false;
};

// Flush-thread side of the process-wide map.
// Takes a pair if none was taken at this tick (tick_ns = FlushContext::now_ns),
// then converts. A disagreement turns the TSC off in the hooks (logged once).
uint64_t TicksToNs(uint64_t tsc, uint64_t tick_ns);
// Both ends of a call that started at start_tsc and took `ticks`, with the
// checks above made once (one call per socket.op on the flush thread).
void TickSpanToNs(uint64_t start_tsc, uint64_t ticks, uint64_t tick_ns, uint64_t* start_ns, uint64_t* end_ns);
// Several times of one record converted in place, the checks made once; a 0
// (a time the record does not have) stays 0. An exchange's four ends: one
// call instead of four (the per-call checks were ~0.2 % of redis's samples).
void TicksToNsInPlace(uint64_t* ticks, int n, uint64_t tick_ns);
// Keeps the map fresh while nothing is converted (flush thread, ~1/s; every
// tick until the first slope, which switches the hooks to the TSC).
void Refresh(uint64_t now_ns);
// In a fork child, before its flush thread starts: a new map (the parent's
// flush thread may have been updating the copied one).
void ResetAfterFork();

}  // namespace flightrec::tscclock
