// perf_event sampler: per-thread CPU sampling (the cpu-clock software event,
// whose sample period is nanoseconds on the CPU) with registers and a copy of
// the user stack, plus per-thread context-switch sampling for off-CPU stacks.
// Not hardware cycles: in frequency mode the kernel sizes the cycle period
// from wall time between overflows, so a thread that is often off the CPU is
// sampled up to wall/CPU times too often, and a sample's true weight in time
// is unknown. cpu-clock's period is exact.
//
// Each armed thread owns a slot: two perf fds (cpu, switch) writing into one
// mmap ring (PERF_EVENT_IOC_SET_OUTPUT). App threads only open/close events
// (syscalls, no malloc, no locks); the sampler thread (sampler_thread.h)
// drains the rings, unwinds the copied stacks and queues cpu.sample /
// offcpu.sample / sampler.lost for the flush thread (sample_events.h).
//
// Slot states: kFree -> kArming (a thread is opening events) -> kActive;
// the sampler thread moves kActive -> kDraining -> kActive around each read.
// An exiting thread moves its own slot kActive -> kClosing, saves what its
// ring still holds for the sampler thread (no unwinding on an application
// thread), unmaps the ring and frees the slot at once; if the sampler thread
// is draining it at that moment, the owner sets `retire` and the sampler
// thread reclaims it after the drain. Whoever moved a slot out of kActive
// owns its ring until it moves it on, so a read never races an unmap.
//
// The implementation, one job per file (perf_slots.h holds what they share):
// perf_sampler.cc event setup and arming (and the engine, sampler_engine.h),
// perf_ring.cc ring reading, perf_switch_thinning.cc the switch event's
// period, perf_switch_pairs.cc switch-out/switch-in pairs into off-CPU blocks.
#pragma once
#include <sys/types.h>

#include <cstdint>

namespace flightrec::sampler {

struct PerfOptions {
  uint64_t hz = 99;
  uint32_t stack_bytes = 16384;  // PERF_SAMPLE_STACK_USER size (multiple of 8)
  bool offcpu = true;            // open the context-switch event too
  uint64_t offcpu_min_ns = 1000000;
};

struct PerfProbeResult {
  bool cpu_ok = false;     // a CPU sampling event opened on this thread
  bool kernel = false;     // ... and counts time in the kernel too
  bool switch_ok = false;  // context-switch sampling allowed
  int cpu_errno = 0, switch_errno = 0;
};

// Tries the events on the calling thread (then closes them). No side effects.
PerfProbeResult PerfProbe(const PerfOptions& opts);

// Fixes the options and allocates the slot table. Once, at init.
bool PerfConfigure(const PerfOptions& opts, bool kernel, bool switch_ok);
// How long a busy thread takes to fill half its ring at the configured rate
// (after PerfConfigure): nobody drains a ring before the sampler thread
// exists, so the recorder must go live sooner than this (GoLiveWithin).
uint64_t PerfRingHalfFillNs();

// Opens events for `tid` (the calling thread when self). Returns false if the
// kernel refused (the thread stays unsampled by perf). Safe on any app thread
// and inside hooks: syscalls only.
bool PerfArmThread(pid_t tid, bool self);
// True if the calling thread is armed with context-switch sampling.
bool PerfSelfHasSwitch();
// True if `tid` already has a live slot (armed from elsewhere, e.g. at init).
bool PerfAdoptThread(pid_t tid);
// On the exiting thread: stops its events; the sampler thread reclaims the slot.
void PerfDisarmSelf();

// Sampler thread: drains every ring into the sample queue.
// Returns true when some ring was under pressure (a quarter full or more
// when drained, or records were lost): the sampler thread then comes back
// soon instead of waiting for the next watermark.
bool PerfCollect(uint64_t now_ns);

// At exit: disables every event; the next drain emits blocks still pending.
void PerfShutdown();
// At exit, when the sampler thread did not finish its last collection in
// time: consumes what the rings it is not reading still hold, queues the
// samples among it as sampler.lost (per thread) and returns their number.
uint64_t PerfDiscardUnread(uint64_t now_ns);
// In a forked child (single-threaded): drops the parent's events (close only:
// perf rings are VM_DONTCOPY, so the child has no mapping to unmap).
void PerfAtForkChild();

struct PerfStats {
  uint64_t armed = 0, arm_failed = 0, samples = 0, switch_samples = 0, lost = 0, offcpu_emitted = 0, preempted = 0,
           short_blocks = 0, bad_records = 0, switch_outs = 0, period_changes = 0;
};
PerfStats GetPerfStats();

}  // namespace flightrec::sampler
