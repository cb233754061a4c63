// SIGPROF ownership and crash-freeze wakers: see sigprof_owner.h.
#include "preload/crash/sigprof_owner.h"

#include <atomic>

namespace flightrec {
namespace {

std::atomic<const SigprofOwner*> g_owner{nullptr};

constexpr int kMaxWakers = 4;
std::atomic<void (*)()> g_wakers[kMaxWakers];
std::atomic<int> g_waker_count{0};

__attribute__((tls_model("initial-exec"))) __thread bool t_app_blocks_sigprof = false;

}  // namespace

bool AppBlocksSigprof() { return t_app_blocks_sigprof; }
void SetAppBlocksSigprof(bool blocked) { t_app_blocks_sigprof = blocked; }

void RegisterSigprofOwner(const SigprofOwner* owner) { g_owner.store(owner, std::memory_order_release); }

bool SigprofOwned() {
  const SigprofOwner* o = g_owner.load(std::memory_order_acquire);
  return o && o->installed();
}

bool SigprofOwnerIntercept(const struct sigaction* act, struct sigaction* old, int* ret) {
  const SigprofOwner* o = g_owner.load(std::memory_order_acquire);
  return o && o->intercept_sigaction(act, old, ret);
}

void SigprofOwnerPauseTimers() {
  if (const SigprofOwner* o = g_owner.load(std::memory_order_acquire)) o->pause_timers();
}

void SigprofOwnerResumeTimers() {
  if (const SigprofOwner* o = g_owner.load(std::memory_order_acquire)) o->resume_timers();
}

void AddCrashFreezeWaker(void (*wake)()) {
  for (int i = 0; i < g_waker_count.load(std::memory_order_acquire); ++i)
    if (g_wakers[i].load(std::memory_order_relaxed) == wake) return;
  const int slot = g_waker_count.load(std::memory_order_relaxed);
  if (slot >= kMaxWakers) return;
  g_wakers[slot].store(wake, std::memory_order_relaxed);
  g_waker_count.store(slot + 1, std::memory_order_release);
}

void WakeCrashFreezeWakers() {
  const int n = g_waker_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (void (*wake)() = g_wakers[i].load(std::memory_order_relaxed)) wake();
}

}  // namespace flightrec
