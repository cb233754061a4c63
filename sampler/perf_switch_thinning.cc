// perf_event sampler, switch thinning: sets each thread's context-switch
// event's sample period from its measured switch-out rate, and says how
// many blocks a switch sample stands for. Sampler thread only (after each
// drain, perf_ring.cc); the samples themselves are perf_switch_pairs.cc's.
//
// Switch sampling is thinned per thread. Each switch sample carries the whole
// stack copy (16 KiB by default) and is written by the kernel on the host
// thread; an event-loop server switches tens of thousands of times a second,
// which would cost the host microseconds per switch and overflow the ring
// that CPU samples share (every sample lost, CPU ones too). So the sampler
// thread measures each thread's switch-out rate (the SWITCH records, 32 bytes
// each, still mark every switch) and sets the switch event's sample period
// so that about kSwitchSamplesPerSec switch-outs per thread are sampled: the
// period rises at once, falls by halves, and is dithered so a thread whose
// blocks alternate in a fixed pattern is not always sampled on the same one.
// A sampled block stands for `period` blocks (the period is in the sample):
// offcpu.sample's weight field, which profiles multiply into the duration.
// Threads that block rarely keep period 1: every block is seen.
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "preload/fds/fd_guard.h"
#include "sampler/perf_slots.h"

namespace flightrec::sampler::perf {

// How often the rate is re-measured, how many windows a period may stand
// before it is dithered again, and the sparsest sampling allowed (the rate
// aimed at, kSwitchSamplesPerSec, is in perf_slots.h: rings are sized for it).
constexpr uint64_t kSwitchTuneNs = 20'000'000;
constexpr uint32_t kDitherWindows = 10;
constexpr uint64_t kMaxSwitchPeriod = 1u << 20;

// The sample stands for the switches since the previous one: about the
// period (up to twice it right after a period change). When samples were
// lost between, their blocks are not charged to this one's stack and
// duration (one sample would weigh for dozens); sampler.lost counts them.
// `count` is the event's count of switches so far (READ in the sample).
uint64_t SwitchSampleWeight(Slot& slot, uint64_t count) {
  uint64_t since = count > slot.last_switch_count ? count - slot.last_switch_count : 1;
  if (slot.lost_since_switch_sample) since = std::min(since, 2 * std::max(slot.sw_period, slot.prev_sw_period));
  slot.last_switch_count = count;
  slot.lost_since_switch_sample = false;
  return since;
}

namespace {

// xorshift: dithering only, needs no quality.
uint64_t NextRandom() {
  static uint64_t x = 0x9e3779b97f4a7c15ull;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

}  // namespace

// Sampler thread, after a drain: re-measures the thread's switch-out rate
// once per window (or at once when the ring overflowed) and sets the switch
// event's period (see the top of the file).
void TuneSwitchPeriod(Slot& s, uint64_t now_ns, bool overflowed) {
  if (s.sw_fd < 0 || !s.sw_id) return;
  if (!s.tune_start || now_ns < s.tune_start) {
    s.tune_start = now_ns;
    s.tune_outs = 0;
    if (!overflowed) return;
  }
  const uint64_t dt = now_ns - s.tune_start;
  if (dt < kSwitchTuneNs && !overflowed) return;
  // The application may have dup2'd onto our fd: never touch its file.
  if (FdWasLost(s.sw_fd) || !IsProtectedFd(s.sw_fd)) return;
  // The event's count is every switch, even when the ring overflowed and
  // SWITCH records were lost; the records are the fallback.
  uint64_t outs = s.tune_outs, count = 0;
  // The raw syscall: read() is one of our own socket hooks.
  if (syscall(SYS_read, s.sw_fd, &count, sizeof(count)) == static_cast<long>(sizeof(count))) {
    if (s.tune_count_ok && count >= s.tune_count) outs = std::max(outs, count - s.tune_count);
    s.tune_count = count;
    s.tune_count_ok = true;
  }
  const uint64_t per_sec = dt ? outs * 1000000000ull / dt : outs;
  // Rounded down: a window holds few switches of a thread that blocks
  // rarely (two in 20 ms read as 100/s), and rounding up would thin a
  // thread blocking 33 times a second, which should keep period 1.
  uint64_t want = per_sec / kSwitchSamplesPerSec;
  if (overflowed) want = std::max(want, s.sw_period * 8);
  want = std::clamp<uint64_t>(want, 1, kMaxSwitchPeriod);
  uint64_t next = want >= s.sw_period ? want : std::max(want, s.sw_period / 2);
  s.tune_start = now_ns;
  s.tune_outs = 0;
  // Each change restarts the kernel's countdown (the next switch is
  // sampled), so change only for a real difference in rate, or every
  // kDitherWindows windows to move the sampling phase (+-25%).
  const bool redither = ++s.windows_since_change >= kDitherWindows && next >= 4;
  if (!redither && next * 4 >= s.sw_period * 3 && next * 4 <= s.sw_period * 5) return;
  if (next >= 4) next = next - next / 4 + NextRandom() % (next / 2 + 1);
  if (next == s.sw_period) return;
  if (InProgramFdTable() && ioctl(s.sw_fd, PERF_EVENT_IOC_PERIOD, &next) == 0) {
    s.prev_sw_period = s.sw_period;
    s.sw_period = next;
    s.windows_since_change = 0;
    g_perf->counters.period_changes++;
  }
}

}  // namespace flightrec::sampler::perf
