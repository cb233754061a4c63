// Sampler: chooses and runs CPU / off-CPU sampling for the process.
//
//   FLIGHTREC_SAMPLER (sampler.cc picks an engine once, sampler_engine.h):
//   auto (default): SIGPROF timers per thread first (sampler.cc says why
//     this order); perf when SIGPROF is not ours to use: the program already
//     has its own SIGPROF handler, or was built with ThreadSanitizer; and if
//     the program takes SIGPROF later, sampling is handed over to perf.
//   perf: perf_event; a thread perf refuses (locked-memory or descriptor
//     limits) gets a SIGPROF timer instead, where SIGPROF is ours.
//   sigprof: SIGPROF timers only. off: no sampling.
//   Only auto goes on to perf when SIGPROF is refused; any other refusal
//   (perf in auto or perf mode, SIGPROF in sigprof mode) leaves CPU
//   sampling off, logged once.
//   FLIGHTREC_OFFCPU=0 turns off-CPU sampling off. Off-CPU comes from perf's
//   context-switch sampling on threads perf armed with it (needs
//   perf_event_paranoid <= 1 or CAP_PERFMON), else from timing the blocking
//   calls we interpose (FLIGHTREC_OFFCPU_MIN_US): with SIGPROF timers always.
//
// The runtime (preload/runtime/lifecycle.cc, hook_exec.cc, core_events.cc,
// preload/flush/flush_thread.cc) calls these through weak references; they
// live in namespace flightrec for that reason.
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
// The flush thread, between ticks: idle debug information goes (issue #44).
void SamplerTrimSymbolizer(uint64_t now_ns);

namespace sampler {
// preload/runtime/hook_exec.cc: around every exec-family call.
void SamplerBeforeExec();
void SamplerAfterExecFailed();
}  // namespace sampler

}  // namespace flightrec
