// Triggers: see trigger.h. One slot per reason (time, detail, a pending
// flag), so a request never allocates or waits.
#include "preload/runtime/trigger.h"

#include <atomic>

#include "preload/flush/flush_wakeup.h"
#include "preload/runtime/clock.h"

namespace flightrec {
namespace {

constexpr int kReasons = static_cast<int>(TriggerReason::kCount);

struct Slot {
  std::atomic<uint64_t> time_ns{0};
  std::atomic<uint64_t> detail{0};
  std::atomic<bool> pending{false};
};
Slot g_slots[kReasons];

}  // namespace

const char* TriggerReasonName(TriggerReason reason) {
  switch (reason) {
    case TriggerReason::kCrash: return "crash";
    case TriggerReason::kDemand: return "demand";
    case TriggerReason::kSlowRequest: return "slow_request";
    case TriggerReason::kRss: return "rss";
    case TriggerReason::kFatalSignal: return "fatal_signal";
    default: return "unknown";
  }
}

void RequestTrigger(TriggerReason reason, uint64_t detail) {
  const int i = static_cast<int>(reason);
  if (i < 0 || i >= kReasons) return;
  g_slots[i].time_ns.store(MonotonicNs(), std::memory_order_relaxed);
  g_slots[i].detail.store(detail, std::memory_order_relaxed);
  g_slots[i].pending.store(true, std::memory_order_release);
  NudgeFlushThread();
}

int TakePendingTriggers(PendingTrigger* out) {
  int n = 0;
  for (int i = 0; i < kReasons; i++) {
    if (!g_slots[i].pending.exchange(false, std::memory_order_acq_rel)) continue;
    out[n++] = PendingTrigger{static_cast<TriggerReason>(i), g_slots[i].time_ns.load(std::memory_order_relaxed),
                              g_slots[i].detail.load(std::memory_order_relaxed)};
  }
  return n;
}

}  // namespace flightrec
