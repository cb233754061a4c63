// SIGPROF sampler: the fallback when perf_event_open is refused (or
// FLIGHTREC_SAMPLER=sigprof). Each thread gets a POSIX timer on its own CPU
// clock (timer_create(CLOCK_THREAD_CPUTIME_ID, SIGEV_THREAD_ID)); the SIGPROF
// handler copies the registers and the top of the stack into a record of the
// thread's sample ring and returns. The sampler thread (sampler_thread.h)
// unwinds the copies (stack_unwinder.h): the handler never walks the stack
// (that can take the loader's lock).
//
// A sample weighs the thread CPU time since the one before. On a CPU-starved
// machine the kernel loses timer signals (a timer can fall silent for good);
// the sampler thread notices a thread three periods past its last sample and
// sends the SIGPROF itself (Rescue in the .cc).
//
// Each timer has a slot holding its thread's ring; the timer's sival_ptr
// points at the slot, so the handler needs no thread-local lookup. Slot
// states: kFree -> kArming -> kArmed -> kRetiring (timer deleted; from then
// on the handler never touches the ring) -> kFree (the sampler thread drained
// it). A slot keeps its ring memory for its next thread; rings are never
// unmapped, so a late signal can never write into freed memory.
//
// The application comes first: if it has its own SIGPROF handler before we
// start, the sampler is not used; if it installs one later, we delete our
// timers, hand SIGPROF over to it (step aside, logged once, counted). SIG_IGN
// and SIG_DFL set by the application are honoured for every SIGPROF that is
// not ours while our handler stays installed. Before exec the calling
// thread's timer is deleted and a pending SIGPROF of ours is consumed, so the
// new image never inherits one.
#pragma once
#include <signal.h>
#include <sys/types.h>

#include <cstdint>

#include "preload/flush/flush_registry.h"
#include "preload/stacks/stack_unwinder.h"

namespace flightrec::sampler {

// Ring record of one sample; `stack_len` bytes follow.
struct CpuSampleRecord {
  uint64_t time_ns;
  uint64_t period_ns;   // thread CPU time since the previous sample (TakeSample)
  uint64_t stack_addr;  // sp at the interrupt; stack[0] is the byte at this address
  stacks::RegisterSet regs;
  int32_t tid;
  uint32_t stack_len;
  uint8_t stack[];
};

struct SigprofOptions {
  uint64_t hz = 99;
  uint32_t stack_bytes = 16384;
};

// Installs the handler unless the application already has its own SIGPROF
// handler (then returns false with *why set). Once, at init.
bool SigprofInstall(const SigprofOptions& opts, const char** why);
bool SigprofInstalled();
// Arms the calling thread (and learns its stack bounds for a fault-free copy).
bool SigprofArmSelf();

// The main thread's stack as the handler's plain copy may read it,
// [*lo, *hi), found from AT_EXECFN and one mincore instead of
// /proc/self/maps (the .cc says how). False on any other thread, when sp
// lies deeper than the 128 KiB exec maps below the arguments, or when
// AT_EXECFN is not at the stack's top (a program started through ld.so).
bool MainThreadStackBounds(uint64_t sp, uint64_t* lo, uint64_t* hi);
// Arms another thread of this process (threads alive at init); the sampler
// thread notices when it is gone.
bool SigprofArmThread(pid_t tid);
bool SigprofSelfArmed();
bool SigprofAdoptThread(pid_t tid);
// Crash freeze (preload/crash/crash_freeze.h): stop every armed timer, and start
// them again. Async-signal-safe (system calls only).
void SigprofPauseTimers();
void SigprofResumeTimers();
void SigprofDisarmSelf();

// Sampler thread: drains every ring into the sample queue; reclaims the
// slots of threads that are gone; with `rescue`, signals threads whose timer
// fell silent (the sampler thread's collections; not an exit's last one,
// which runs on a program thread).
void SigprofCollect(uint64_t now_ns, bool rescue);
// Flush source for counters that only the flush thread may report (footer).
void RegisterSigprofFlushSource();

// At exit: deletes every timer; the handler stays (late signals are ignored).
void SigprofShutdown();
void SigprofAtForkChild();
void SigprofBeforeExec();
void SigprofAfterExecFailed();

// sigaction(SIGPROF, ...) from the application, while our handler is in
// place. Returns true if it handled the call (result in *ret); false means
// "pass it to libc" (we are not, or no longer, using SIGPROF).
bool SigprofInterceptSigaction(const struct sigaction* act, struct sigaction* old, int* ret);

// Called (on the application's thread, inside its sigaction call, possibly
// in a signal handler: async-signal-safe work only) right after the sampler
// steps aside. With an observer set, stepping aside is logged at info level:
// the observer is expected to carry on sampling some other way.
void SetSigprofStepAsideObserver(void (*observer)(bool program_call));

struct SigprofStats {
  uint64_t armed = 0, arm_failed = 0, stepped_aside = 0, dropped = 0, samples = 0;
  uint64_t rescued = 0;  // samples the sampler thread asked for (a timer's signal was lost)
};
SigprofStats GetSigprofStats();

}  // namespace flightrec::sampler
