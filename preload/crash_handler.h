// Crash capture: on SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT in the host,
// record a "crash" event (signal, code, fault address, thread, registers and
// a stack copy unwound later), have the flush thread drain and seal, then
// hand the signal on exactly as it would have gone without us: to the
// application's earlier handler if it had one, else the default action, so
// the exit status and core dump are unchanged.
#pragma once
#include "preload/config.h"

namespace flightrec {

// Installs the handlers (FLIGHTREC_CRASH=1). Called by lifecycle at init.
void CrashHandlerInit(const Config& config);

}  // namespace flightrec
