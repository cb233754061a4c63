// The interface both CPU samplers implement (the shape of async-profiler's
// Engine): start, arm and disarm a thread, drain, stop, and what a fork or an
// exec needs. sampler.cc picks an engine once (FLIGHTREC_SAMPLER) and then
// calls through it instead of branching between parallel Perf* and Sigprof*
// functions; the sampler thread drains every engine (sampler_thread.cc).
//
// Two engines, each a constant table of plain function pointers defined
// beside its sampler (perf_sampler.cc, sigprof_sampler.cc): no heap, no
// constructor, no lock, so the calls are as safe as the functions behind
// them. The per-thread entries run in thread-start and thread-exit hooks and
// must stay so: system calls only, no malloc, no locks.
//
// Both engines can be live at once: a perf process samples the threads perf
// refuses with SIGPROF timers (sampler.cc's per-thread fallback), and auto
// mode hands a SIGPROF process over to perf when the application takes
// SIGPROF. Process-wide calls (disarm at thread exit, drain, stop, fork, exec)
// therefore go to every engine in kEngines, each doing nothing when it was
// never started.
#pragma once
#include <sys/types.h>

#include <cstdint>

namespace flightrec::sampler {

struct EngineOptions {
  uint64_t hz = 99;
  uint32_t stack_bytes = 16384;  // copied per sample (multiple of 8)
  bool offcpu = false;           // off-CPU wanted at all
  uint64_t offcpu_min_ns = 1000000;
};

struct SamplerEngine {
  const char* name;  // "perf", "sigprof": SamplerModeName()

  // ---- once per process, at init or at a hand-over (not a hot path) ----
  // Sets the engine up for the process. On refusal returns false with *why
  // (a static string); the caller logs it as refusal_prefix why refusal_suffix.
  bool (*start)(const EngineOptions& opts, const char** why);
  const char* refusal_prefix;
  const char* refusal_suffix;
  // Logs (info) what the started engine samples: the line naming the mode.
  void (*announce)();
  // After start: the engine gives off-CPU time itself (perf's context-switch
  // sampling), so the blocking-call hooks are not needed where it armed.
  bool (*gives_offcpu)();
  // How soon a busy thread's ring needs its first drain (the recorder must
  // go live within it: GoLiveWithin); UINT64_MAX when nothing presses.
  uint64_t (*first_drain_within_ns)();

  // ---- per thread: thread-start/exit hooks, init (syscalls only) ----
  // The calling thread `tid` was armed from elsewhere (at init): take it.
  bool (*adopt_self)(pid_t tid);
  // Arms the calling thread `tid`.
  bool (*arm_self)(pid_t tid);
  // Arms another thread of this process (threads alive at init).
  bool (*arm_thread)(pid_t tid);
  // The calling thread's off-CPU time comes from this engine (armed with
  // context-switch sampling).
  bool (*self_gives_offcpu)();
  // On the exiting thread: stops its sampling.
  void (*disarm_self)();

  // ---- sampler thread (or the exit's last collection) ----
  // Drains every ring into the sample queue. Returns true when some ring was
  // under pressure: the sampler thread then comes back soon.
  bool (*drain)(uint64_t now_ns);

  // ---- process lifecycle ----
  // At exit, before the final drain: stops sampling every thread.
  void (*stop)();
  // At exit, when the sampler thread did not finish its last collection in
  // time: counts what the rings it is not reading hold as sampler.lost and
  // returns the number of samples.
  uint64_t (*discard_unread)(uint64_t now_ns);
  // In a forked child (single-threaded): drops the parent's events/timers.
  void (*at_fork_child)();
  // Around an exec-family call of the calling thread.
  void (*before_exec)();
  void (*after_exec_failed)();
  // While this engine is the mode and the sampler thread runs, the flush
  // thread may move into a descriptor table of its own
  // (SamplerKeepsProgramFdTable, preload/fds/own_fd_table.h): the SIGPROF
  // engine holds no descriptor, while perf's events are descriptors in the
  // program's table that the exit's last collection reads.
  bool flush_thread_may_leave_program_fds;
};

extern const SamplerEngine kPerfEngine;     // perf_sampler.cc
extern const SamplerEngine kSigprofEngine;  // sigprof_sampler.cc

// Every engine, in the order process-wide calls reach them.
inline constexpr const SamplerEngine* kEngines[] = {&kPerfEngine, &kSigprofEngine};

}  // namespace flightrec::sampler
