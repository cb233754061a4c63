// Flush thread "flightrec-flush": every FLIGHTREC_FLUSH_MS (every 5 ms while
// some thread writes fast), or at once when a ring passes a quarter full
// (flush_wakeup.h), it drains every
// thread's ring and the registered flush sources into the SegmentWriter,
// writes blocks about once a second, rotates and seals segments, enforces the
// disk budget, and pauses/resumes recording when the output is unusable.
#pragma once
#include <cstdint>

#include "preload/runtime/core_events.h"

namespace flightrec {

// Creates the writer, opens the first segment and starts the thread. The
// recorder goes live at the thread's first tick (after FLIGHTREC_FLUSH_MS,
// or sooner when a ring passes a quarter full): only then do the live hooks
// run (flush_registry.h: the sampler's thread starts there), so a process
// that lives a few milliseconds never has those threads. Returns false
// (after logging one line) if the thread cannot be started; a bad output
// directory is not fatal: the thread starts and retries it.
bool StartFlushThread(const ProcessInfo& info);

// Why the writer's final drain and seal is asked for.
enum class StopReason : int {
  // exit, _exit, _Exit, the program's last thread gone: the final hooks (the
  // sampler's last collection) run before the final drain and the shutdown
  // hooks (the uploader's last shipping) after the seal.
  kProcessEnding,
  // exec, or a uid switch: the image goes on or is replaced; recording may
  // start again (StartFlushThread) after the call.
  kRestart,
  // exec in a forked child: a child that never went live writes nothing (a
  // shell's fork before exec carries nothing a user needs).
  kRestartDiscardUnlessLive,
};

// Asks the flush thread for its final drain and seal and waits for it until
// deadline_ns (CLOCK_MONOTONIC); for kProcessEnding, then also for the
// shutdown hooks, within FLIGHTREC_UPLOAD_SHUTDOWN_MS more. Returns true if
// the seal finished in time. The work runs on the flush thread (lifted to the
// caller's priority): the calling thread is a program's (in a signal handler,
// on a small stack, holding a malloc lock), so it only asks and waits —
// async-signal-safe, allocation-free, bounded, about 200 bytes of stack.
// Several callers at once (threads exiting together) all wait for the one
// seal. When the flush thread itself ends the process (last thread gone),
// the work runs inline there.
bool StopFlushThread(uint64_t deadline_ns, StopReason why);

// After a StopFlushThread that returned true: waits (bounded) until the
// stopped thread has left the process altogether, not only our code. A uid
// switch needs it: glibc runs the program's later setresgid/setgroups on
// every thread it still lists, a thread on its way out included, and aborts
// the program when that thread's call fails (recorder_caps.h: an exiting
// thread no longer takes on the program's capabilities). False if it was
// still there at the deadline.
bool WaitForStoppedFlushThreadGone(uint64_t deadline_ns);

// From a fatal-signal handler (async-signal-safe): asks the flush thread to
// drain every ring and seal the active segment now, and waits for it until
// deadline_ns. Recording pauses afterwards (it resumes if the process lives).
bool RequestCrashFlushAndWait(uint64_t deadline_ns);
// The process survived a crash signal (its handler went on): recording, paused
// after the crash seal, resumes at the next tick. Async-signal-safe.
void ResumeAfterCrash();

// In a forked child: forget the parent's writer and thread (their memory is
// abandoned, the inherited fd closed) and start afresh for the child; its
// writer and first segment wait for its first tick (a shell's child that
// execs at once never opens one).
void RestartFlushThreadInChild(const ProcessInfo& info);

}  // namespace flightrec
