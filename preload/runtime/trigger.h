// Triggers: the one entry point every trigger source calls to say "keep
// (and ship) what led up to now" — the crash handler, the flush thread's
// own checks (on-demand file, RSS, slow requests), the exit path.
//
// RequestTrigger is async-signal-safe (atomics, clock_gettime and a futex
// wake): the crash handler calls it from a fatal signal. It only notes the
// request; the flush thread turns requests into `trigger` events and
// incidents (preload/flush/window_keeper.h) on its next tick.
#pragma once
#include <cstdint>

namespace flightrec {

enum class TriggerReason : uint32_t {
  kCrash = 0,    // a fatal signal
  kDemand,       // `flightrec-dump trigger PID` (a control file, no signal)
  kSlowRequest,  // an exchange slower than FLIGHTREC_TRIGGER_SLOW_MS
  kRss,          // resident memory above FLIGHTREC_TRIGGER_RSS_MB
  kFatalSignal,  // a termination signal left at its default action, but
                 // SIGTERM and SIGINT (an orderly stop is not an incident)
  kCount
};

const char* TriggerReasonName(TriggerReason reason);

// Any thread, signal handlers included. `detail` is reason-specific (the
// signal number, the slow exchange's duration in ns, the RSS in bytes, the
// exit status). A second request of the same reason before the flush thread
// took the first counts as one (the later detail wins).
void RequestTrigger(TriggerReason reason, uint64_t detail);

struct PendingTrigger {
  TriggerReason reason;
  uint64_t time_ns;  // CLOCK_MONOTONIC of the request
  uint64_t detail;
};

// Flush thread: moves the pending requests into out[] (at most kCount),
// returns how many.
int TakePendingTriggers(PendingTrigger* out);

}  // namespace flightrec
