// Sampler thread "flightrec-sampl" (the name fits the 15-character limit): every FLIGHTREC_FLUSH_MS it drains the
// perf rings and the SIGPROF rings, unwinds the copied stacks and queues the
// samples for the flush thread (sample_events.h). It never symbolizes and
// never writes the segment, so the flush thread's slow moments (libdw's first
// look at a module, compression, disk) do not overflow the sampling rings.
// A recorder thread: all signals blocked, nice +10, never sampled itself.
#pragma once
#include <cstdint>

namespace flightrec::sampler {

// Starts the thread (once). Returns false if it cannot be created.
bool StartSamplerThread(uint64_t period_ms);
// How StopSamplerThread went.
enum class StopOutcome {
  kNotRunning,
  kTookOverIdle,         // the thread was between collections: no wait at all
  kWaitedForCollection,  // it was mid-collection; it finished before the deadline
  kTimedOut,             // it was mid-collection and did not finish: samples it holds are lost
};
// Stops the thread and runs the last collection on the calling thread. Never
// waits for the thread to be scheduled unless it is in the middle of a
// collection, and then only until deadline_ns (CLOCK_MONOTONIC).
StopOutcome StopSamplerThread(uint64_t deadline_ns);
// In a forked child: the parent's thread does not exist here; start anew.
void RestartSamplerThreadInChild();

}  // namespace flightrec::sampler
