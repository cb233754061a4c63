// Who owns SIGPROF: the registration point through which the SIGPROF sampler
// (sampler/sigprof_sampler.h) offers the signal hooks and crash freeze what
// they need of it, so the runtime never includes the sampler.
//
//  * hook_signal.cc asks whether SIGPROF is ours (to keep it out of the
//    masks application threads block) and hands the application's SIGPROF
//    sigaction calls to the owner;
//  * crash_freeze.cc stops and restarts the owner's timers, and wakes every
//    recorder thread that parks (the sampler thread among them).
//
//  * hook_signal.cc also remembers, per thread, whether the program asked to
//    block SIGPROF (AppBlocksSigprof): it is kept unblocked for sampling, so
//    the owner's handler must know that a SIGPROF which is not its own was
//    meant to stay pending for the program's sigwait or signalfd.
//
// Registration happens once at init, before any timer is armed; every
// function here is async-signal-safe (atomic loads, then the owner's own
// async-signal-safe calls) and is a no-op while no owner is registered.
#pragma once
#include <signal.h>

namespace flightrec {

struct SigprofOwner {
  bool (*installed)();  // our SIGPROF handler is in place and not stepped aside
  // sigaction(SIGPROF) from the application; true if handled (*ret set).
  bool (*intercept_sigaction)(const struct sigaction* act, struct sigaction* old, int* ret);
  void (*pause_timers)();
  void (*resume_timers)();
};

// `owner` must have static storage. Once, at init.
void RegisterSigprofOwner(const SigprofOwner* owner);

bool SigprofOwned();

// Whether the program has SIGPROF in its mask on this thread, as it set it
// (true while we keep it unblocked behind its back). Inherited by threads
// the program creates. Plain TLS: async-signal-safe.
bool AppBlocksSigprof();
void SetAppBlocksSigprof(bool blocked);
bool SigprofOwnerIntercept(const struct sigaction* act, struct sigaction* old, int* ret);
void SigprofOwnerPauseTimers();
void SigprofOwnerResumeTimers();

// A recorder thread that parks during a crash freeze registers how to wake
// it (an eventfd write, async-signal-safe). At most four; once each, at init.
void AddCrashFreezeWaker(void (*wake)());
void WakeCrashFreezeWakers();

}  // namespace flightrec
