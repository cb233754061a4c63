// Optional features: every entry point through which the runtime calls a
// feature that may not be linked in (the unit tests' core library has no
// hooks, sampler or uploader start-up; a build may leave one out), declared
// in this one place.
//
// Each is a weak reference: the caller tests it before the call
// (`if (SamplerInit) SamplerInit(config);`), so a missing feature is
// skipped. The features define them in their own files (alloc_profiler.cc,
// alloc_sampler.cc,
// sampler/sampler.cc and sampler_thread.cc, socket_init.cc, crash_handler.cc,
// term_signals.cc, uploader/uploader.cc) and declare them in their own
// headers without `weak` (a definition that saw `weak` would itself become a
// weak symbol). Keep the signatures here and there the same: a weak
// reference that matches no definition silently stays null.
#pragma once
#include <cstdint>

#include "format/segment_writer.h"
#include "preload/runtime/config.h"

namespace flightrec {

// lifecycle.cc: start-up, in this order (see InitRecorder there).
void AllocProfilerInit(const Config&) __attribute__((weak));
bool MallocReachesAllocHooks() __attribute__((weak));
void SamplerInit(const Config&) __attribute__((weak));
const char* SamplerModeName() __attribute__((weak));
void SocketsInit(const Config&) __attribute__((weak));
void CrashHandlerInit(const Config&) __attribute__((weak));
void TermSignalsInit(const Config&) __attribute__((weak));
void UploaderInit(const Config&) __attribute__((weak));
// lifecycle.cc (OwnWorkOnAppThread): the calling thread's allocation
// sampling held off while the recorder works on it (*countdown and *in_hook
// receive what to resume with), then resumed exactly where it was.
void AllocSamplingHold(int64_t* countdown, uint32_t* in_hook) __attribute__((weak));
void AllocSamplingResume(int64_t countdown, uint32_t in_hook) __attribute__((weak));
// lifecycle.cc: in a forked child.
void SamplerAtFork() __attribute__((weak));
void UploaderAtFork() __attribute__((weak));

// core_events.cc and flush/flush_thread.cc: the sampler's symbolizer for
// the segment writer's new pcs.
format::PcDescriber* SamplerPcDescriber() __attribute__((weak));
// flush/flush_thread.cc: whether the sampler lets the flush thread leave the
// program's descriptor table (a SIGPROF sampler, hosted or with its thread
// in the program's table), whether its thread makes the process's exit
// (EndProcess), and dropping the symbolizer.
bool SamplerKeepsProgramFdTable() __attribute__((weak));
bool SamplerThreadEndsProcess() __attribute__((weak));
void SamplerAbandonSymbolizer() __attribute__((weak));
// flush/flush_thread.cc, at the end of a tick: the symbolizer frees the
// debug information of modules idle since (Symbolizer::DropIdleDebugInfo).
void SamplerTrimSymbolizer(uint64_t now_ns) __attribute__((weak));

namespace sampler {
// flush/flush_thread.cc: the collection the flush thread hosts
// (sampler/sampler_thread.h).
bool SamplerHosted() __attribute__((weak));
int SamplerHostedCollect() __attribute__((weak));
int SamplerHostedEpollFd(int* event_fd) __attribute__((weak));
// hook_exec.cc: around every exec-family call.
void SamplerBeforeExec() __attribute__((weak));
void SamplerAfterExecFailed() __attribute__((weak));
}  // namespace sampler

}  // namespace flightrec
