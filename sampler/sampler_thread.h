// Sampler thread "flightrec-sampl" (the name fits the 15-character limit):
// drains the perf rings and the SIGPROF rings, unwinds the copied stacks and
// queues the samples for the flush thread (sample_events.h). It never
// symbolizes and never writes the segment, so the flush thread's slow
// moments (libdw's first look at a module, compression, disk) do not
// overflow the sampling rings.
//
// It sleeps until a ring needs draining (a SIGPROF handler nudges it through
// a futex word at a quarter of its ring; with perf, the kernel's watermark, a
// quarter of the ring, wakes an epoll set, made with the first perf ring, so
// that a process sampled with SIGPROF holds no descriptor for this) or the period
// passes (FLIGHTREC_FLUSH_MS): a quiet process wakes it rarely, a busy one as
// often as its rings need. Waking on a timer alone cost this VM ~35 us per
// wake-up, 200 times a second, whether or not anything was sampled.
// A recorder thread: all signals blocked, nice +10, never sampled itself.
#pragma once
#include <cstdint>

namespace flightrec::sampler {

// Adds a perf ring's fd to the wake-up set, made with the first (any
// thread; at arming).
void WatchRingFd(int fd);
// True while a stopper waits for the thread's collection to end: the
// collection leaves what the rings still hold to the stopper's last one.
bool SamplerStopRequested();
// True once the thread was created and until a stopper took it over.
bool SamplerThreadRunning();
// True on the sampler thread itself.
bool IsSamplerThread();
// A SIGPROF ring passed a quarter full: async-signal-safe, keeps errno.
void NudgeSamplerThread();
// Sampler thread, during a collection: come back within `ms` at the latest
// (a sampled thread is running, so no idle back-off; a SIGPROF timer the
// kernel starved waits for its rescue). The smallest request wins.
void SamplerWakeWithin(int ms);
// Asks the sampler thread to run `task` once, before its next collection
// (async-signal-safe: an atomic store and a nudge). One task at a time; a
// second request before the first ran replaces it.
void RunOnSamplerThread(void (*task)());
// Asks for the thread (once); it sleeps at most period_ms between
// collections. It is created when the recorder goes live
// (StartDeferredSamplerThread, a live hook: preload/flush/flush_registry.h),
// so a process that lives a few milliseconds never has one: its handlers'
// samples wait in their rings (or are dropped and counted if a ring fills)
// and the flush thread's final sequence collects them. Returns false if it cannot be had.
bool StartSamplerThread(uint64_t period_ms);
// The live hook: creates the thread StartSamplerThread asked for (flush thread).
void StartDeferredSamplerThread();
// How StopSamplerThread went.
enum class StopOutcome {
  kNotRunning,
  kNeverStarted,         // asked for but the recorder never went live: collected here
  kTookOverIdle,         // the thread was between collections: no wait at all
  kWaitedForCollection,  // it was mid-collection; it finished before the deadline
  kTimedOut,             // it was mid-collection and did not finish: samples it holds are lost
};
// Stops the thread and runs the last collection on the calling thread. Never
// waits for the thread to be scheduled unless it is in the middle of a
// collection, and then only until deadline_ns (CLOCK_MONOTONIC).
StopOutcome StopSamplerThread(uint64_t deadline_ns);
// In a forked child: the parent's thread does not exist here; the child's is
// asked for again and starts when the child's recorder goes live.
void RestartSamplerThreadInChild();

}  // namespace flightrec::sampler
