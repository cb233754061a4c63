// The collection: draining the perf rings and the SIGPROF rings, unwinding
// the copied stacks and queuing the samples for the flush thread
// (sample_events.h).
//
// By default (FLIGHTREC_SAMPLER_THREAD=0) it is hosted: the flush thread
// runs it (SamplerHostedCollect) before each of its ticks and whenever a ring
// asks, so a process has one recorder thread, not two (issue #44). Its slow
// moments then delay the collection: for the longest, libdw's first look at
// a module and at a large compile unit, a helper thread collects meanwhile
// (SlowWorkScope, SlowWorkWatch, below); without it a Rust program at
// 499 Hz lost 35-59 of ~300 samples (docs/LIMITS.md). The rest (compression,
// disk) the rings ride out (perf rings are sized for 250 ms of starvation,
// ring_sizing.h; a SIGPROF ring holds at least four samples, and what
// overflows is counted).
//
// With FLIGHTREC_SAMPLER_THREAD=1 it has a thread of its own,
// "flightrec-sampl" (the name fits the 15-character limit), which never
// symbolizes and never writes the segment. The rest of this header describes
// that thread; hosted, the same calls reach the flush thread.
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
#include <optional>

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
bool StartSamplerThread(uint64_t period_ms, bool own_thread);
// The live hook: creates the thread StartSamplerThread asked for, or (not
// own_thread) makes the calling flush thread the collector.
void StartDeferredSamplerThread();
// The flush thread collects (no sampler thread).
bool SamplerHosted();
// Flush thread: one collection, when hosted. Returns within how many ms the
// next one is wanted, or -1 (not hosted, or stopped).
int SamplerHostedCollect();
// The flush thread, hosting the collection, is about to do something that
// may take long (libdw's first look at a module's ELF and DWARF: tens of ms,
// seconds for a large binary or under a sanitizer): for the scope's life a
// helper thread, "flightrec-help", collects in its place, so the sampling
// rings do not overflow meanwhile. The helper is made at the start and
// joined at the end; nested scopes share it. Elsewhere (not hosted, another
// thread, the collection stopped) it does nothing.
class SlowWorkScope {
 public:
  SlowWorkScope();
  ~SlowWorkScope();
  SlowWorkScope(const SlowWorkScope&) = delete;
  SlowWorkScope& operator=(const SlowWorkScope&) = delete;

 private:
  bool entered_ = false;
};
// A SlowWorkScope entered only once the work has lasted kSlowAfterNs (wall
// time), for work whose length is not known ahead: indexing one compile
// unit's functions takes microseconds for most units and tens of
// milliseconds, more on a niced thread of a busy machine, for a Rust
// crate's single large unit. Poll() between small steps of the work.
class SlowWorkWatch {
 public:
  static constexpr uint64_t kSlowAfterNs = 2000000;
  SlowWorkWatch();
  void Poll() {
    if (start_ns_ && ++steps_ % 256 == 0) PollSlow();
  }

 private:
  void PollSlow();
  uint64_t start_ns_ = 0;  // 0: nothing to watch (not the hosting flush thread)
  uint32_t steps_ = 0;
  std::optional<SlowWorkScope> scope_;
};
// Flush thread: the epoll set its sleep should wait on (perf rings' watermarks)
// and in *event_fd (may be null) the eventfd that nudges it; -1 when it
// should sleep on its futex word (no perf ring, or the set is in another
// descriptor table).
int SamplerHostedEpollFd(int* event_fd);
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
