// The real pthread_sigmask, for the recorder's own mask changes.
//
// preload/crash/hook_signal.cc interposes pthread_sigmask and leaves SIGPROF out
// of what application threads block while the SIGPROF sampler owns it. The
// recorder's own calls (blocking every signal around creating its threads,
// consuming a queued SIGPROF before exec) must mean exactly what they say,
// so they call this instead of the interposed name.
#pragma once
#include <signal.h>

namespace flightrec {

int RealPthreadSigmask(int how, const sigset_t* set, sigset_t* old);

}  // namespace flightrec
