// Sampler: chooses and runs CPU / off-CPU sampling for the process.
//
//   FLIGHTREC_SAMPLER=auto (default): SIGPROF timers per thread, else perf
//   (where SIGPROF is not ours: the program took it, or it was built with
//   TSan; sampler.cc says why this order); perf: perf only; sigprof:
//   SIGPROF only; off: no sampling.
//   FLIGHTREC_OFFCPU=0 turns off-CPU sampling off. Off-CPU comes from
//   perf context-switch sampling where allowed, else from timing the
//   blocking calls we interpose (FLIGHTREC_OFFCPU_MIN_US).
//
// The runtime (preload/runtime/lifecycle.cc, preload/flush/flush_thread.cc) calls these
// through weak references; they live in namespace flightrec for that reason.
// Every thread is armed on itself when it starts (thread observer), threads
// alive at init are armed from the init thread, and each is disarmed on exit.
#pragma once
#include "format/segment_writer.h"
#include "preload/runtime/config.h"

namespace flightrec {

// Once, at init, after the flush registry is ready and before the flush
// thread starts. Logs the choice once (info) and any fallback (warn).
void SamplerInit(const Config& config);
// "perf", "sigprof" or "off": what SamplerInit chose.
const char* SamplerModeName();
// In a forked child (single-threaded): drop the parent's events and timers,
// re-arm the calling thread, start a fresh symbolizer.
void SamplerAtFork();
// At exit, before the final drain: stop sampling; blocks still open are
// written by the final drain.
void SamplerShutdown();
// The symbolizer for the flush thread's segment writer (created on first use).
format::PcDescriber* SamplerPcDescriber();

namespace sampler {
// preload/runtime/hook_exec.cc: around every exec-family call.
void SamplerBeforeExec();
void SamplerAfterExecFailed();
}  // namespace sampler

}  // namespace flightrec
