// Termination signals: SIGTERM from a service manager, SIGINT, SIGHUP,
// SIGPIPE, SIGALRM and the like end a process that left them at their
// default action without running any exit handler. The last second of the
// trace (still in the rings and the writer's buffer) would be lost, the
// segment left unsealed, and nothing would say why the process ended.
//
// Where the application left such a signal at SIG_DFL, our handler records a
// process.killed event (signal, code, sender), has the flush thread drain and
// seal (bounded), then puts SIG_DFL back and raises the signal again: the
// process dies of it as it would have, with the same wait status and core
// dump.
//
// Only SIG_DFL is taken over. When the application installs a handler or
// SIG_IGN, it gets exactly that (it then handles the signal and leaves
// through exit() or _exit(), which the recorder sees); when it puts SIG_DFL
// back, we hold the signal again. While we hold it, sigaction reports the
// disposition the application set.
// Not in a PID namespace's init (pid 1): the kernel drops the default
// action's signals sent to it, so a handler would change what happens.
#pragma once
#include <signal.h>

#include "preload/runtime/config.h"

namespace flightrec {

// Installs the handlers (with FLIGHTREC_CRASH=1). Called by lifecycle at init.
void TermSignalsInit(const Config& config);

// Whether sig is one this module may take over.
bool IsTermSignal(int sig);

// The sigaction hook, for a termination signal: the application's new
// disposition (a handler or SIG_IGN is installed for real and we step aside;
// SIG_DFL is, or becomes again, ours) and the previous one in *old. False:
// not ours to answer, go to libc.
bool TermSigaction(int sig, const struct sigaction* act, struct sigaction* old, int* ret);

}  // namespace flightrec
