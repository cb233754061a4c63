// Sampler thread (see sampler_thread.h).
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
#include "sampler/perf_sampler.h"
#include "sampler/sigprof_sampler.h"

namespace flightrec::sampler {
namespace {

struct ThreadCtl {
  uint64_t period_ns = 5000000;
  std::atomic<bool> stop{false};
  // Futex word the thread sleeps on between collections; Stop wakes it so an
  // exiting process does not wait out a sleep.
  std::atomic<int> wake{0};
  std::atomic<bool> done{false};
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
  while (!g_ctl.stop.load(std::memory_order_acquire)) {
    const timespec ts{static_cast<time_t>(g_ctl.period_ns / 1000000000ull),
                      static_cast<long>(g_ctl.period_ns % 1000000000ull)};
    syscall(SYS_futex, reinterpret_cast<int*>(&g_ctl.wake), FUTEX_WAIT_PRIVATE, 0, &ts, nullptr, 0);
    Collect();
  }
  Collect();  // what the threads recorded before sampling stopped
  g_ctl.done.store(true, std::memory_order_release);
  return nullptr;
}

bool Launch() {
  g_ctl.stop.store(false);
  g_ctl.done.store(false);
  g_ctl.wake.store(0);
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

bool StopSamplerThread(uint64_t deadline_ns) {
  if (!g_ctl.started) return true;
  g_ctl.stop.store(true, std::memory_order_release);
  g_ctl.wake.store(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<int*>(&g_ctl.wake), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  while (!g_ctl.done.load(std::memory_order_acquire)) {
    if (MonotonicNs() >= deadline_ns) return false;
    const timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
  pthread_join(g_ctl.thread, nullptr);
  g_ctl.started = false;
  return true;
}

void RestartSamplerThreadInChild() {
  if (!g_ctl.started) return;
  g_ctl.started = false;  // the parent's thread is not ours to join
  Launch();
}

}  // namespace flightrec::sampler
