// Crash capture: on SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT in the host,
// record a "crash" event (signal, code, fault address, thread, registers and
// a stack copy unwound later), have the flush thread drain and seal, then
// hand the signal on exactly as it would have gone without us: to the
// application's earlier handler if it had one, else the default action, so
// the exit status and core dump are unchanged.
#pragma once
#include <signal.h>

#include "preload/runtime/config.h"

namespace flightrec {

// Installs the handlers (FLIGHTREC_CRASH=1). Called by lifecycle at init.
void CrashHandlerInit(const Config& config);

// The sigaction hook, for a crash signal our handler owns: records the
// application's new disposition behind ours and reports the previous one in
// *old, as if it were installed. False: not ours, go to libc.
bool CrashSigaction(int sig, const struct sigaction* act, struct sigaction* old);

// From the exit paths (_exit, exit): true if this thread is inside the
// application's handler for a crash signal (the crash is recorded and the
// trace sealed already): the caller must then leave without the ordinary
// shutdown, which may allocate and lock.
bool CrashExitFromHandler();

}  // namespace flightrec
