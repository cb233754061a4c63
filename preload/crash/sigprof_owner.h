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
bool SigprofOwnerIntercept(const struct sigaction* act, struct sigaction* old, int* ret);
void SigprofOwnerPauseTimers();
void SigprofOwnerResumeTimers();

// A recorder thread that parks during a crash freeze registers how to wake
// it (an eventfd write, async-signal-safe). At most four; once each, at init.
void AddCrashFreezeWaker(void (*wake)());
void WakeCrashFreezeWakers();

}  // namespace flightrec
