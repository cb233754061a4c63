// Signal interposers: sigaction, signal, bsd_signal, sysv_signal, sigset,
// sigignore, sigprocmask, pthread_sigmask, and syscall() for rt_sigaction.
//  * Dispositions: SIGPROF while the SIGPROF sampler owns it
//    (sampler/sigprof_sampler.h, registered through
//    preload/crash/sigprof_owner.h): the application's SIG_IGN/SIG_DFL are
//    remembered and honoured, and an application handler makes the sampler
//    step aside and hand SIGPROF over. The crash signals while crash capture
//    owns them (preload/crash/crash_handler.h): the application's disposition is
//    kept behind our handler, which hands signals on to it. Termination
//    signals left at SIG_DFL while we hold them (preload/crash/term_signals.h):
//    SIG_DFL stays ours; a handler or SIG_IGN is installed for real.
//  * glibc's sigset and sigignore call libc's internal sigaction, and a raw
//    rt_sigaction through syscall() calls none: for the signals above they
//    are routed through the sigaction interposer here, or our tables and the
//    kernel would disagree (a program's SIG_DFL would meet our timers'
//    signals; a later sigaction of a crash signal would never be installed).
//    An rt_sigaction made with an inline system call cannot be seen; the
//    SIGPROF sampler notices that one later (sigprof_sampler.h).
//  * sigprocmask, pthread_sigmask: a no-op for libunwind's lock on our flush
//    thread while it unwinds (preload/stacks/stack_unwinder.h, t_in_unwinder);
//    recorder threads keep every signal blocked, so there is nothing to
//    change. On application threads, SIGPROF is left out of what they block
//    while the SIGPROF sampler owns it: servers commonly block every signal
//    in their workers (one thread takes signals with sigwait), and a blocked
//    SIGPROF would leave those threads unsampled. What the program asked for
//    is remembered (AppBlocksSigprof) and reported back as its mask; a
//    SIGPROF that is not ours arriving on such a thread was meant for the
//    program's sigwait or signalfd, and the sampler gives SIGPROF back
//    (sigprof_sampler.h).
// Every other call goes straight to libc.
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "preload/crash/crash_handler.h"
#include "preload/crash/raw_syscall.h"
#include "preload/crash/sigprof_owner.h"
#include "preload/crash/signal_mask.h"
#include "preload/crash/term_signals.h"
#include "preload/fds/validation_pipe.h"
#include "preload/runtime/recorder_caps.h"
#include "preload/runtime/seccomp_state.h"
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
std::atomic<SignalFn> g_sigset;
using SigignoreFn = int (*)(int);
std::atomic<SigignoreFn> g_sigignore;

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

// Around a mask change on an application thread: the mask as the program
// set it reports SIGPROF blocked if it asked for that (we may have kept it
// unblocked), and what it now asks is remembered (sigprof_owner.h).
// `was_blocked` is AppBlocksSigprof() from before the call.
void TrackAppSigprof(int how, const sigset_t* set, sigset_t* old, bool was_blocked) {
  if (flightrec::IsRecorderThread()) return;
  if (old && was_blocked) sigaddset(old, SIGPROF);
  if (!set) return;
  const bool named = sigismember(set, SIGPROF) == 1;
  if (how == SIG_SETMASK) flightrec::SetAppBlocksSigprof(named);
  else if (how == SIG_BLOCK && named) flightrec::SetAppBlocksSigprof(true);
  else if (how == SIG_UNBLOCK && named) flightrec::SetAppBlocksSigprof(false);
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
  const bool was_blocked = flightrec::AppBlocksSigprof();
  const int ret = real(how, WithoutOwnedSigprof(how, set, &scratch), old);
  if (ret == 0) TrackAppSigprof(how, set, old, was_blocked);
  return ret;
}

FR_HOOK int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  if (flightrec::stacks::t_in_unwinder && flightrec::IsRecorderThread()) {
    if (old) sigfillset(old);
    return 0;
  }
  sigset_t scratch;
  const bool was_blocked = flightrec::AppBlocksSigprof();
  const int ret = flightrec::RealPthreadSigmask(how, WithoutOwnedSigprof(how, set, &scratch), old);
  if (ret == 0) TrackAppSigprof(how, set, old, was_blocked);
  return ret;
}

namespace {

// The signals whose dispositions we keep tables of (see the top of the file).
bool ManagedSignal(int sig) { return sig == SIGPROF || IsCrashSignal(sig) || flightrec::IsTermSignal(sig); }

}  // namespace

// glibc's sigset, with the disposition and mask changes made through the
// interposers above.
FR_HOOK sighandler_t sigset(int sig, sighandler_t disp) {
  if (!ManagedSignal(sig)) {
    SignalFn real = Resolve(&g_sigset, "sigset");
    if (!real) return errno = ENOSYS, SIG_ERR;
    return real(sig, disp);
  }
  sigset_t one, was;
  sigemptyset(&one);
  sigaddset(&one, sig);
  struct sigaction old;
  std::memset(&old, 0, sizeof(old));
  if (disp == SIG_HOLD) {
    if (sigprocmask(SIG_BLOCK, &one, &was) != 0) return SIG_ERR;
    if (sigismember(&was, sig)) return SIG_HOLD;
    if (sigaction(sig, nullptr, &old) != 0) return SIG_ERR;
    return old.sa_handler;
  }
  const struct sigaction act = SignalStyleAction(disp, 0);
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  if (sigprocmask(SIG_UNBLOCK, &one, &was) != 0) return SIG_ERR;
  return sigismember(&was, sig) ? SIG_HOLD : old.sa_handler;
}

FR_HOOK int sigignore(int sig) {
  if (!ManagedSignal(sig)) {
    SigignoreFn real = Resolve(&g_sigignore, "sigignore");
    if (!real) return errno = ENOSYS, -1;
    return real(sig);
  }
  const struct sigaction act = SignalStyleAction(SIG_IGN, 0);
  return sigaction(sig, &act, nullptr);
}

namespace {

// The kernel's struct sigaction (rt_sigaction's, not glibc's).
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

constexpr unsigned long kSaRestorer = 0x04000000;  // the kernel's SA_RESTORER (not in glibc's headers)

// A raw rt_sigaction of a signal we keep tables of, made through sigaction
// above. glibc's sigaction puts in its own restorer, which does what any
// restorer must (rt_sigreturn).
long RtSigactionThroughHooks(int sig, const KernelSigaction* kact, KernelSigaction* kold) {
  struct sigaction act, old;
  std::memset(&act, 0, sizeof(act));
  std::memset(&old, 0, sizeof(old));
  if (kact) {
    act.sa_handler = kact->handler;
    act.sa_flags = static_cast<int>(kact->flags & ~kSaRestorer);
    std::memcpy(&act.sa_mask, &kact->mask, sizeof(kact->mask));
  }
  if (sigaction(sig, kact ? &act : nullptr, kold ? &old : nullptr) != 0) return -1;
  if (kold) {
    kold->handler = old.sa_handler;
    kold->flags = static_cast<unsigned long>(old.sa_flags);
    kold->restorer = old.sa_restorer;
    std::memcpy(&kold->mask, &old.sa_mask, sizeof(kold->mask));
  }
  return 0;
}

}  // namespace

// syscall(): rt_sigaction of a signal we keep tables of goes through
// sigaction above; everything else is made as it was asked, with glibc's
// return convention (-1 and errno). The system call is made here, with no
// lookup of libc's syscall: our own code calls syscall() from signal
// handlers too. Not instrumented by ASan: like glibc's, it reads all six
// argument words whether the caller passed them or not (the sixth from the
// caller's stack), which ASan reports as a stack underflow.
FR_HOOK __attribute__((no_sanitize("address"))) long syscall(long nr, ...) {
  va_list ap;
  va_start(ap, nr);
  long a[6];
  for (long& v : a) v = va_arg(ap, long);  // as glibc: six registers, used or not
  va_end(ap);
  if (nr == SYS_rt_sigaction && a[3] == static_cast<long>(sizeof(uint64_t)) && ManagedSignal(static_cast<int>(a[0])))
    return RtSigactionThroughHooks(static_cast<int>(a[0]), reinterpret_cast<const KernelSigaction*>(a[1]),
                                   reinterpret_cast<KernelSigaction*>(a[2]));
  // libunwind's address check, written into its pipe that is no descriptor.
  // The fd is an int passed through `...`: only the low 32 bits are its own
  // (the kernel reads no more either).
  if (__builtin_expect(nr == SYS_write && static_cast<int>(a[0]) == flightrec::kValidationWriteFd, 0))
    return flightrec::ValidationPipeWrite(reinterpret_cast<const void*>(a[1]), static_cast<size_t>(a[2]));
  // A seccomp filter about to be installed (seccomp_state.h): from now on
  // nothing of ours makes a call it could kill on.
  if (__builtin_expect(nr == SYS_seccomp || (nr == SYS_prctl && static_cast<int>(a[0]) == PR_SET_SECCOMP), 0))
    flightrec::NoteSeccompFilter(nr == SYS_seccomp ? "the program's seccomp(2)"
                                                   : "the program's prctl(PR_SET_SECCOMP)");
  // The program's capset, mirrored onto our threads (recorder_caps.h).
  const long ret =
      __builtin_expect(nr == SYS_capset, 0)
          ? flightrec::CapsetThroughHook(reinterpret_cast<const void*>(a[0]), reinterpret_cast<const void*>(a[1]))
          : flightrec::RawSyscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (__builtin_expect(nr == SYS_prctl && static_cast<int>(a[0]) == PR_SET_KEEPCAPS && ret == 0, 0))
    flightrec::RecorderCapsAfterKeepCaps(static_cast<unsigned long>(a[1]));
  if (ret < 0 && ret > -4096) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  return ret;
}
