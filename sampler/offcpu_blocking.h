// Off-CPU from interposed blocking calls: the fallback when context-switch
// sampling is refused (or with the SIGPROF sampler). sampler/hook_blocking.cc
// times poll/select/epoll/sleeps/condvar/mutex waits on threads where this is
// on; a call that blocked at least FLIGHTREC_OFFCPU_MIN_US records its stack
// (captured in place after the call returns) into the thread's ring.
#pragma once
#include <atomic>
#include <cstdint>

#include "preload/stacks/local_stack.h"

namespace flightrec::sampler {

// Per thread: true when this thread's off-CPU time comes from the hooks.
// Initial-exec TLS so the hooks' fast path is one load.
extern __thread bool t_offcpu_hooks __attribute__((tls_model("initial-exec")));
// Minimum duration recorded (ns); set once at init.
extern uint64_t g_offcpu_min_ns;

// Off inside a stack capture: libunwind's own lock must not be timed (the
// capture it would trigger re-enters libunwind while that lock is held).
// Process-wide: set when off-CPU moved to perf's context switches after
// threads were started with the hooks on (SIGPROF handed to the application).
extern std::atomic<bool> g_offcpu_hooks_retired;
inline bool OffCpuHooksOn() {
  return t_offcpu_hooks && !stacks::t_in_local_capture && !g_offcpu_hooks_retired.load(std::memory_order_relaxed);
}

// Records one block if it lasted at least g_offcpu_min_ns. `reason` must be
// a string with static storage (e.g. "poll"). Called directly by a hook: the
// stack starts at that hook's frame (this function's own frame is dropped).
// No host malloc, no locks; a full ring counts a drop.
// extra_skip: frames between the hook and this call to drop as well (the
// socket hooks call it from their timed-call helper).
void OffCpuNoteBlock(uint64_t start_ns, uint64_t end_ns, const char* reason, int extra_skip = 0);

void SetThreadOffCpuHooks(bool on);
void RegisterOffCpuDecoding();

}  // namespace flightrec::sampler
