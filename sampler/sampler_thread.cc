// Sampler thread (see sampler_thread.h).
//
// Stopping (exit) never waits for this thread to be scheduled: it runs at
// nice +10 and busy host threads can starve it for as long as they like. The
// phase word decides who owns the collection state (perf batch, SIGPROF ring
// consumers): a stopper that finds the thread idle takes over at once and
// collects on its own thread; one that finds it mid-collection waits for that
// collection alone (bounded), with the thread lifted to the stopper's
// scheduling class (LiftRecorderThread).
#include "sampler/sampler_thread.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "preload/clock.h"
#include "preload/log.h"
#include "preload/recorder_thread.h"
#include "preload/thread_registry.h"
#include "sampler/perf_sampler.h"
#include "sampler/sigprof_sampler.h"

namespace flightrec::sampler {
namespace {

// kIdle/kCollecting: the thread owns the collection state (between / in a
// collection). kStopRequested: a stopper waits for the collection to end.
// kStopped: the stopper owns it; the thread only leaves.
enum Phase : int { kIdle, kCollecting, kStopRequested, kStopped };

struct ThreadCtl {
  uint64_t period_ns = 5000000;
  std::atomic<int> phase{kIdle};
  // Futex word the thread sleeps on between collections; Stop wakes it so it
  // leaves without waiting out a sleep.
  std::atomic<int> wake{0};
  std::atomic<pid_t> tid{0};
  bool started = false;
  pthread_t thread{};
};

ThreadCtl g_ctl;
static_assert(sizeof(std::atomic<int>) == sizeof(int), "futex word");

void Collect() {
  const uint64_t now = MonotonicNs();
  PerfCollect(now);
  SigprofCollect(now);
}

void* SamplerMain(void*) {
  g_ctl.tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
  for (;;) {
    const timespec ts{static_cast<time_t>(g_ctl.period_ns / 1000000000ull),
                      static_cast<long>(g_ctl.period_ns % 1000000000ull)};
    syscall(SYS_futex, reinterpret_cast<int*>(&g_ctl.wake), FUTEX_WAIT_PRIVATE, 0, &ts, nullptr, 0);
    int expected = kIdle;
    if (!g_ctl.phase.compare_exchange_strong(expected, kCollecting, std::memory_order_acq_rel)) break;
    Collect();
    expected = kCollecting;
    if (!g_ctl.phase.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel)) {
      g_ctl.phase.store(kStopped, std::memory_order_release);  // hand the state to the stopper
      break;
    }
  }
  return nullptr;
}

bool Launch() {
  g_ctl.phase.store(kIdle);
  g_ctl.wake.store(0);
  g_ctl.tid.store(0);
  const int rc = CreateRecorderThread(&g_ctl.thread, "flightrec-sampl", SamplerMain, nullptr);
  g_ctl.started = rc == 0;
  if (!g_ctl.started) Log(LogLevel::kWarn, "cannot start the sampler thread (error %d); CPU samples are lost", rc);
  return g_ctl.started;
}

}  // namespace

bool StartSamplerThread(uint64_t period_ms) {
  if (g_ctl.started) return true;
  g_ctl.period_ns = (period_ms ? period_ms : 5) * 1000000ull;
  return Launch();
}

StopOutcome StopSamplerThread(uint64_t deadline_ns) {
  if (!g_ctl.started) return StopOutcome::kNotRunning;
  StopOutcome outcome = StopOutcome::kTookOverIdle;
  for (;;) {
    int expected = kIdle;
    if (g_ctl.phase.compare_exchange_strong(expected, kStopped, std::memory_order_acq_rel)) break;
    if (expected == kStopped) break;
    if (expected == kCollecting &&
        !g_ctl.phase.compare_exchange_strong(expected, kStopRequested, std::memory_order_acq_rel))
      continue;  // it went idle meanwhile
    outcome = StopOutcome::kWaitedForCollection;
    LiftRecorderThread(g_ctl.tid.load(std::memory_order_acquire));
    while (g_ctl.phase.load(std::memory_order_acquire) != kStopped) {
      if (MonotonicNs() >= deadline_ns) {
        // It keeps the collection state; the process ends without it.
        g_ctl.started = false;
        return StopOutcome::kTimedOut;
      }
      const timespec ts{0, 1000000};
      nanosleep(&ts, nullptr);
    }
    break;
  }
  // It wakes, finds kStopped and leaves on its own: never join a thread the
  // scheduler may not run for a while.
  g_ctl.wake.store(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<int*>(&g_ctl.wake), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  pthread_detach(g_ctl.thread);
  g_ctl.started = false;
  // The last collection (what the threads recorded before sampling stopped)
  // on this thread, at the host's priority; marked as a recorder thread
  // meanwhile so its own allocations are not recorded.
  const uint32_t saved_flags = tls_thread_flags;
  tls_thread_flags |= kThreadFlagRecorder;
  Collect();
  tls_thread_flags = saved_flags;
  return outcome;
}

void RestartSamplerThreadInChild() {
  if (!g_ctl.started) return;
  g_ctl.started = false;  // the parent's thread is not ours to join
  Launch();
}

}  // namespace flightrec::sampler
