// Signal interposers: sigaction, signal, bsd_signal, sysv_signal and
// sigprocmask.
//  * Dispositions: SIGPROF while the SIGPROF sampler owns it
//    (sampler/sigprof_sampler.h, registered through
//    preload/crash/sigprof_owner.h): the application's SIG_IGN/SIG_DFL are
//    remembered and honoured, and an application handler makes the sampler
//    step aside and hand SIGPROF over. The crash signals while crash capture
//    owns them (preload/crash/crash_handler.h): the application's disposition is
//    kept behind our handler, which hands signals on to it. Termination
//    signals left at SIG_DFL while we hold them (preload/crash/term_signals.h):
//    SIG_DFL stays ours; a handler or SIG_IGN is installed for real.
//  * sigprocmask, pthread_sigmask: a no-op for libunwind's lock on our flush
//    thread while it unwinds (preload/stacks/stack_unwinder.h, t_in_unwinder);
//    recorder threads keep every signal blocked, so there is nothing to
//    change. On application threads, SIGPROF is left out of what they block
//    while the SIGPROF sampler owns it: servers commonly block every signal
//    in their workers (one thread takes signals with sigwait), and a blocked
//    SIGPROF would leave those threads unsampled. The application has no
//    handler for it (else the sampler steps aside), so nothing it waits for
//    changes.
// Every other call goes straight to libc.
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>

#include <atomic>
#include <cstring>

#include "preload/crash/crash_handler.h"
#include "preload/crash/sigprof_owner.h"
#include "preload/crash/signal_mask.h"
#include "preload/crash/term_signals.h"
#include "preload/threads/thread_registry.h"
#include "preload/stacks/stack_unwinder.h"

#define FR_HOOK extern "C" __attribute__((visibility("default")))

namespace {

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
using SignalFn = sighandler_t (*)(int, sighandler_t);
using SigprocmaskFn = int (*)(int, const sigset_t*, sigset_t*);

template <typename Fn>
Fn Resolve(std::atomic<Fn>* slot, const char* name) {
  Fn fn = slot->load(std::memory_order_acquire);
  if (__builtin_expect(fn != nullptr, 1)) return fn;
  fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  slot->store(fn, std::memory_order_release);
  return fn;
}

std::atomic<SigactionFn> g_sigaction;
std::atomic<SignalFn> g_signal, g_bsd_signal, g_sysv_signal;
std::atomic<SigprocmaskFn> g_sigprocmask;

// The set an application thread asks to block, without SIGPROF while the
// sampler owns it (see the top of the file). Returns `set` itself when
// nothing needs removing, else `scratch`.
const sigset_t* WithoutOwnedSigprof(int how, const sigset_t* set, sigset_t* scratch) {
  if (!set || how == SIG_UNBLOCK || !sigismember(set, SIGPROF)) return set;
  if (!flightrec::SigprofOwned() || flightrec::IsRecorderThread()) return set;
  *scratch = *set;
  sigdelset(scratch, SIGPROF);
  return scratch;
}

// The sigaction a signal()-family call means: handler, empty mask, and the
// flags the libc variant uses.
struct sigaction SignalStyleAction(sighandler_t handler, int flags) {
  struct sigaction act;
  std::memset(&act, 0, sizeof(act));
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  act.sa_flags = flags;
  return act;
}

// signal()-style install of SIGPROF through the sampler. Returns true if the
// sampler handled it.
bool InterceptSignal(sighandler_t handler, int flags, sighandler_t* result) {
  if (!flightrec::SigprofOwned()) return false;
  struct sigaction act = SignalStyleAction(handler, flags), old;
  std::memset(&old, 0, sizeof(old));
  int ret = 0;
  if (!flightrec::SigprofOwnerIntercept(&act, &old, &ret)) return false;
  *result = ret == 0 ? old.sa_handler : SIG_ERR;
  return true;
}

bool IsCrashSignal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT;
}

// signal()-style install of a crash signal behind our crash handler (see
// crash_handler.h).
bool InterceptCrashSignal(int sig, sighandler_t handler, int flags, sighandler_t* result) {
  if (!IsCrashSignal(sig) || handler == SIG_ERR) return false;
  struct sigaction act = SignalStyleAction(handler, flags), old;
  std::memset(&old, 0, sizeof(old));
  if (!flightrec::CrashSigaction(sig, &act, &old)) return false;
  *result = old.sa_handler;
  return true;
}

// signal()-style install of a termination signal we hold at its default
// action (see term_signals.h).
bool InterceptTermSignal(int sig, sighandler_t handler, int flags, sighandler_t* result) {
  if (!flightrec::IsTermSignal(sig) || handler == SIG_ERR) return false;
  struct sigaction act = SignalStyleAction(handler, flags), old;
  std::memset(&old, 0, sizeof(old));
  int ret = 0;
  if (!flightrec::TermSigaction(sig, &act, &old, &ret)) return false;
  *result = ret == 0 ? old.sa_handler : SIG_ERR;
  return true;
}

// A vfork child (Python's subprocess resets SIGPIPE there before exec) runs
// in the parent's memory: the tables behind the interceptions above (the
// application's handlers behind ours, held signals, SIGPROF's owner) are the
// parent's, and a write from the child would change what the parent's
// crash chain calls or what its sigaction reports. The child sets its own
// dispositions for real and none of ours; a query of a signal we own still
// answers what the application set.
int VforkChildSigaction(SigactionFn real, int sig, const struct sigaction* act, struct sigaction* old) {
  if (flightrec::IsTermSignal(sig)) {
    int ret = 0;
    if (flightrec::TermSigaction(sig, act, old, &ret)) return ret;  // vfork-aware itself
  }
  struct sigaction app;
  bool have_app = false;
  if (old) {
    int r = 0;
    if (sig == SIGPROF) have_app = flightrec::SigprofOwnerIntercept(nullptr, &app, &r) && r == 0;
    else if (IsCrashSignal(sig)) have_app = flightrec::CrashSigaction(sig, nullptr, &app);
  }
  const int ret = real(sig, act, old);
  if (ret == 0 && old && have_app) *old = app;
  return ret;
}

}  // namespace

FR_HOOK int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  SigactionFn real = Resolve(&g_sigaction, "sigaction");
  if (!real) return errno = ENOSYS, -1;
  if (flightrec::InVforkChild()) return VforkChildSigaction(real, sig, act, old);
  if (sig == SIGPROF) {
    int ret = 0;
    if (flightrec::SigprofOwnerIntercept(act, old, &ret)) return ret;
  }
  if (IsCrashSignal(sig) && flightrec::CrashSigaction(sig, act, old)) return 0;
  if (flightrec::IsTermSignal(sig)) {
    int ret = 0;
    if (flightrec::TermSigaction(sig, act, old, &ret)) return ret;
  }
  return real(sig, act, old);
}

namespace {

// The signal() family: the same interceptions as sigaction, with the flags
// each libc variant installs a handler with; `real` is that variant.
sighandler_t SignalFamily(int sig, sighandler_t handler, int flags, std::atomic<SignalFn>* slot, const char* name) {
  sighandler_t result;
  if (!flightrec::InVforkChild()) {  // a vfork child: see VforkChildSigaction
    if (sig == SIGPROF && InterceptSignal(handler, flags, &result)) return result;
    if (InterceptCrashSignal(sig, handler, flags, &result)) return result;
    if (InterceptTermSignal(sig, handler, flags, &result)) return result;
  }
  SignalFn real = Resolve(slot, name);
  if (!real) return errno = ENOSYS, SIG_ERR;
  return real(sig, handler);
}

}  // namespace

FR_HOOK sighandler_t signal(int sig, sighandler_t handler) {
  return SignalFamily(sig, handler, SA_RESTART, &g_signal, "signal");
}

FR_HOOK sighandler_t bsd_signal(int sig, sighandler_t handler) {
  return SignalFamily(sig, handler, SA_RESTART, &g_bsd_signal, "bsd_signal");
}

FR_HOOK sighandler_t sysv_signal(int sig, sighandler_t handler) {
  return SignalFamily(sig, handler, SA_RESETHAND | SA_NODEFER, &g_sysv_signal, "sysv_signal");
}

FR_HOOK int sigprocmask(int how, const sigset_t* set, sigset_t* old) {
  if (flightrec::stacks::t_in_unwinder && flightrec::IsRecorderThread()) {
    // The mask is and stays "everything blocked"; report it as such.
    if (old) sigfillset(old);
    return 0;
  }
  SigprocmaskFn real = Resolve(&g_sigprocmask, "sigprocmask");
  if (!real) return errno = ENOSYS, -1;
  sigset_t scratch;
  return real(how, WithoutOwnedSigprof(how, set, &scratch), old);
}

FR_HOOK int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  if (flightrec::stacks::t_in_unwinder && flightrec::IsRecorderThread()) {
    if (old) sigfillset(old);
    return 0;
  }
  sigset_t scratch;
  return flightrec::RealPthreadSigmask(how, WithoutOwnedSigprof(how, set, &scratch), old);
}
