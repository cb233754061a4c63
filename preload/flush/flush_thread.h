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

// Asks the thread for a final drain and seal and waits for it until
// deadline_ns (CLOCK_MONOTONIC). Returns true if it finished in time. The
// final tick runs on the calling thread (in a forked child that never went
// live it opens the child's segment first). discard_unless_live: a forked
// child that never went live writes nothing (it execs at once).
bool StopFlushThread(uint64_t deadline_ns, bool discard_unless_live = false);

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
