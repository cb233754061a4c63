// Our own work on an application thread: the scope in which the recorder
// does something of its own on a thread of the program's (opening the first
// segment and starting our thread at init, a privilege drop, the hand-over
// to perf when the program takes SIGPROF).
#pragma once
#include <cstdint>

#include "preload/runtime/features.h"
#include "preload/threads/thread_registry.h"

namespace flightrec {

// What the malloc family allocates meanwhile (our init's state, a new
// thread's TLS) goes to the recorder's heap, not the program's, and is not
// recorded as the application's; the thread's allocation sampling resumes
// exactly where it was (a recorder-flagged allocation would turn it off for
// good).
class OwnWorkOnAppThread {
 public:
  OwnWorkOnAppThread() : flags_(t_thread_flags) {
    if (AllocSamplingHold) AllocSamplingHold(&countdown_, &in_hook_);
    t_thread_flags |= kThreadFlagRecorder;
  }
  ~OwnWorkOnAppThread() {
    t_thread_flags = flags_;
    if (AllocSamplingResume) AllocSamplingResume(countdown_, in_hook_);
  }

 private:
  uint32_t flags_;
  int64_t countdown_ = 0;
  uint32_t in_hook_ = 0;
};

}  // namespace flightrec
