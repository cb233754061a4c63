// Crash freeze: see crash_freeze.h.
#include "preload/crash/crash_freeze.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <ctime>

#include "preload/runtime/clock.h"
#include "preload/flush/flush_wakeup.h"
#include "preload/crash/sigprof_owner.h"

namespace flightrec {
namespace {

constexpr uint64_t kMaxFreezeNs = 5ull * 1000 * 1000 * 1000;
constexpr uint64_t kParkWaitNs = 100ull * 1000 * 1000;

std::atomic<uint32_t> g_frozen{0};  // the futex word: 1 while frozen
std::atomic<uint64_t> g_began_ns{0};
std::atomic<int> g_members{0};
std::atomic<int> g_parked{0};

void Sleep(uint64_t ns) { SleepNs(ns); }  // never through our nanosleep hook

}  // namespace

void CrashFreezeBegin() {
  const int saved_errno = errno;
  g_began_ns.store(MonotonicNs(), std::memory_order_relaxed);
  g_frozen.store(1, std::memory_order_seq_cst);
  // A SIGPROF handler reads our globals, which the report may be filling
  // with test patterns: no timer fires until the end.
  SigprofOwnerPauseTimers();
  NudgeFlushThread();
  WakeCrashFreezeWakers();
  const uint64_t deadline = MonotonicNs() + kParkWaitNs;
  while (g_parked.load(std::memory_order_seq_cst) < g_members.load(std::memory_order_seq_cst) &&
         MonotonicNs() < deadline)
    Sleep(1000000);
  // A parker is counted just before its futex call: give it time to get in.
  Sleep(1000000);
  errno = saved_errno;
}

void CrashFreezeEnd() {
  if (g_frozen.exchange(0, std::memory_order_seq_cst) == 0) return;
  const int saved_errno = errno;
  SigprofOwnerResumeTimers();
  syscall(SYS_futex, &g_frozen, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  errno = saved_errno;
}

bool CrashFrozen() { return g_frozen.load(std::memory_order_relaxed) != 0; }

void CrashFreezePark() {
  if (g_frozen.load(std::memory_order_acquire) == 0) return;
  g_parked.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    if (g_frozen.load(std::memory_order_acquire) == 0) break;
    const uint64_t now = MonotonicNs();
    const uint64_t end = g_began_ns.load(std::memory_order_relaxed) + kMaxFreezeNs;
    if (now >= end) {
      CrashFreezeEnd();  // nobody said the program went on: assume it did
      break;
    }
    const uint64_t left = end - now;
    timespec ts = NsToTimespec(left);
    syscall(SYS_futex, &g_frozen, FUTEX_WAIT_PRIVATE, 1, &ts, nullptr, 0);
  }
  g_parked.fetch_sub(1, std::memory_order_seq_cst);
}

void CrashFreezeJoin() { g_members.fetch_add(1, std::memory_order_seq_cst); }
void CrashFreezeLeave() { g_members.fetch_sub(1, std::memory_order_seq_cst); }

void CrashFreezeResetInChild() {
  g_frozen.store(0, std::memory_order_relaxed);
  g_members.store(0, std::memory_order_relaxed);
  g_parked.store(0, std::memory_order_relaxed);
}

}  // namespace flightrec
