// Blocking-call interposers for the off-CPU fallback: poll, ppoll, select,
// pselect, epoll_wait, epoll_pwait, nanosleep, clock_nanosleep, usleep, sleep,
// pthread_cond_wait/timedwait and pthread_mutex_lock.
//
// Active only on threads whose off-CPU time cannot come from perf
// context-switch sampling (sampler/offcpu_blocking.h); elsewhere each hook is
// one TLS load and a tail call to libc. When active, a call is timed with two
// clock reads (the TSC where the socket clock uses it, else CLOCK_MONOTONIC)
// and, if it blocked at least FLIGHTREC_OFFCPU_MIN_US, its stack is
// recorded. errno and return values are passed through intact.
// Calls that cannot block (zero timeouts, an uncontended mutex) are not timed.
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "preload/runtime/clock.h"
#include "preload/runtime/tsc_clock.h"
#include "sampler/offcpu_blocking.h"

#define FR_HOOK extern "C" __attribute__((visibility("default")))

namespace {

using flightrec::MonotonicNs;
using flightrec::tscclock::ApproxTicksToNs;
using flightrec::tscclock::HooksReadTsc;
using flightrec::tscclock::TscWord;
using flightrec::sampler::OffCpuHooksOn;
using flightrec::sampler::OffCpuNoteBlock;

// libc's definition of `name`, resolved on first use (dlsym may allocate,
// which the malloc hooks serve from their bootstrap arena).
template <typename Fn>
Fn Resolve(std::atomic<Fn>* slot, const char* name, const char* version = nullptr) {
  Fn fn = slot->load(std::memory_order_acquire);
  if (__builtin_expect(fn != nullptr, 1)) return fn;
  void* p = version ? dlvsym(RTLD_NEXT, name, version) : nullptr;
  if (!p) p = dlsym(RTLD_NEXT, name);
  fn = reinterpret_cast<Fn>(p);
  slot->store(fn, std::memory_order_release);
  return fn;
}

// Times `call_expr` and notes the block; errno survives the bookkeeping. A
// macro, not a helper: the pc where the stack is captured must belong to
// the hook itself (named like the call), not to an inlined helper frame.
// Where the socket hooks' TSC clock is on and calibrated (tsc_clock.h),
// the two reads are rdtsc and a call that did not block stops at one
// compare; clock_gettime is ~2.5x an rdtsc on a VM, and an event loop's
// epoll_wait that finds work waiting never blocks.
#define FR_TIMED(reason, call_expr)                                          \
  do {                                                                       \
    const uint64_t fr_word = TscWord();                                      \
    if (HooksReadTsc(fr_word)) {                                             \
      const uint64_t fr_t0 = __rdtsc();                                      \
      auto fr_result = call_expr;                                            \
      const uint64_t fr_ticks = __rdtsc() - fr_t0;                           \
      if (__builtin_expect(fr_ticks >= fr_word, 0)) {                        \
        const int fr_saved = errno;                                          \
        const uint64_t fr_end = MonotonicNs();                               \
        OffCpuNoteBlock(fr_end - ApproxTicksToNs(fr_ticks), fr_end, reason); \
        errno = fr_saved;                                                    \
      }                                                                      \
      return fr_result;                                                      \
    }                                                                        \
    const uint64_t fr_start = MonotonicNs();                                 \
    auto fr_result = call_expr;                                              \
    const int fr_saved = errno;                                              \
    OffCpuNoteBlock(fr_start, MonotonicNs(), reason);                        \
    errno = fr_saved;                                                        \
    return fr_result;                                                        \
  } while (0)

bool ZeroTimespec(const timespec* ts) { return ts && ts->tv_sec == 0 && ts->tv_nsec == 0; }

using PollFn = int (*)(pollfd*, nfds_t, int);
using PpollFn = int (*)(pollfd*, nfds_t, const timespec*, const sigset_t*);
using SelectFn = int (*)(int, fd_set*, fd_set*, fd_set*, timeval*);
using PselectFn = int (*)(int, fd_set*, fd_set*, fd_set*, const timespec*, const sigset_t*);
using EpollWaitFn = int (*)(int, epoll_event*, int, int);
using EpollPwaitFn = int (*)(int, epoll_event*, int, int, const sigset_t*);
using NanosleepFn = int (*)(const timespec*, timespec*);
using ClockNanosleepFn = int (*)(clockid_t, int, const timespec*, timespec*);
using UsleepFn = int (*)(useconds_t);
using SleepFn = unsigned (*)(unsigned);
using CondWaitFn = int (*)(pthread_cond_t*, pthread_mutex_t*);
using CondTimedwaitFn = int (*)(pthread_cond_t*, pthread_mutex_t*, const timespec*);
using MutexFn = int (*)(pthread_mutex_t*);

std::atomic<PollFn> g_poll;
std::atomic<PpollFn> g_ppoll;
std::atomic<SelectFn> g_select;
std::atomic<PselectFn> g_pselect;
std::atomic<EpollWaitFn> g_epoll_wait;
std::atomic<EpollPwaitFn> g_epoll_pwait;
std::atomic<NanosleepFn> g_nanosleep;
std::atomic<ClockNanosleepFn> g_clock_nanosleep;
std::atomic<UsleepFn> g_usleep;
std::atomic<SleepFn> g_sleep;
std::atomic<CondWaitFn> g_cond_wait;
std::atomic<CondTimedwaitFn> g_cond_timedwait;
std::atomic<MutexFn> g_mutex_lock;
std::atomic<MutexFn> g_mutex_trylock;

}  // namespace

FR_HOOK int poll(pollfd* fds, nfds_t n, int timeout) {
  PollFn real = Resolve(&g_poll, "poll");
  if (!real) return errno = ENOSYS, -1;
  if (!OffCpuHooksOn() || timeout == 0) return real(fds, n, timeout);
  FR_TIMED("poll", real(fds, n, timeout));
}

FR_HOOK int ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
  PpollFn real = Resolve(&g_ppoll, "ppoll");
  if (!real) return errno = ENOSYS, -1;
  if (!OffCpuHooksOn() || ZeroTimespec(timeout)) return real(fds, n, timeout, mask);
  FR_TIMED("ppoll", real(fds, n, timeout, mask));
}

FR_HOOK int select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) {
  SelectFn real = Resolve(&g_select, "select");
  if (!real) return errno = ENOSYS, -1;
  if (!OffCpuHooksOn() || (timeout && timeout->tv_sec == 0 && timeout->tv_usec == 0))
    return real(nfds, r, w, e, timeout);
  FR_TIMED("select", real(nfds, r, w, e, timeout));
}

FR_HOOK int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask) {
  PselectFn real = Resolve(&g_pselect, "pselect");
  if (!real) return errno = ENOSYS, -1;
  if (!OffCpuHooksOn() || ZeroTimespec(timeout)) return real(nfds, r, w, e, timeout, mask);
  FR_TIMED("pselect", real(nfds, r, w, e, timeout, mask));
}

FR_HOOK int epoll_wait(int epfd, epoll_event* events, int max, int timeout) {
  EpollWaitFn real = Resolve(&g_epoll_wait, "epoll_wait");
  if (!real) return errno = ENOSYS, -1;
  if (!OffCpuHooksOn() || timeout == 0) return real(epfd, events, max, timeout);
  FR_TIMED("epoll_wait", real(epfd, events, max, timeout));
}

FR_HOOK int epoll_pwait(int epfd, epoll_event* events, int max, int timeout, const sigset_t* mask) {
  EpollPwaitFn real = Resolve(&g_epoll_pwait, "epoll_pwait");
  if (!real) return errno = ENOSYS, -1;
  if (!OffCpuHooksOn() || timeout == 0) return real(epfd, events, max, timeout, mask);
  FR_TIMED("epoll_pwait", real(epfd, events, max, timeout, mask));
}

FR_HOOK int nanosleep(const timespec* req, timespec* rem) {
  NanosleepFn real = Resolve(&g_nanosleep, "nanosleep");
  if (!real) return errno = ENOSYS, -1;
  if (!OffCpuHooksOn()) return real(req, rem);
  FR_TIMED("nanosleep", real(req, rem));
}

FR_HOOK int clock_nanosleep(clockid_t clock, int flags, const timespec* req, timespec* rem) {
  ClockNanosleepFn real = Resolve(&g_clock_nanosleep, "clock_nanosleep");
  if (!real) return ENOSYS;  // returns the error, does not set errno
  if (!OffCpuHooksOn()) return real(clock, flags, req, rem);
  FR_TIMED("clock_nanosleep", real(clock, flags, req, rem));
}

FR_HOOK int usleep(useconds_t usec) {
  UsleepFn real = Resolve(&g_usleep, "usleep");
  if (!real) return errno = ENOSYS, -1;
  if (!OffCpuHooksOn() || usec == 0) return real(usec);
  FR_TIMED("usleep", real(usec));
}

FR_HOOK unsigned sleep(unsigned seconds) {
  SleepFn real = Resolve(&g_sleep, "sleep");
  if (!real) return seconds;
  if (!OffCpuHooksOn() || seconds == 0) return real(seconds);
  FR_TIMED("sleep", real(seconds));
}

// The condvar functions have two versions in glibc; ours stand for the
// current one (GLIBC_2.3.2), which every program built since 2003 uses.
FR_HOOK int pthread_cond_wait(pthread_cond_t* cond, pthread_mutex_t* mutex) {
  CondWaitFn real = Resolve(&g_cond_wait, "pthread_cond_wait", "GLIBC_2.3.2");
  if (!real) return ENOSYS;
  if (!OffCpuHooksOn()) return real(cond, mutex);
  FR_TIMED("pthread_cond_wait", real(cond, mutex));
}

FR_HOOK int pthread_cond_timedwait(pthread_cond_t* cond, pthread_mutex_t* mutex, const timespec* abstime) {
  CondTimedwaitFn real = Resolve(&g_cond_timedwait, "pthread_cond_timedwait", "GLIBC_2.3.2");
  if (!real) return ENOSYS;
  if (!OffCpuHooksOn()) return real(cond, mutex, abstime);
  FR_TIMED("pthread_cond_timedwait", real(cond, mutex, abstime));
}

// Cheap by construction: an uncontended lock is one trylock and no clock
// read; only a lock that would wait is timed.
FR_HOOK int pthread_mutex_lock(pthread_mutex_t* mutex) {
  MutexFn real = Resolve(&g_mutex_lock, "pthread_mutex_lock");
  if (!real) return ENOSYS;
  if (!OffCpuHooksOn()) return real(mutex);
  MutexFn trylock = Resolve(&g_mutex_trylock, "pthread_mutex_trylock");
  if (trylock) {
    const int r = trylock(mutex);
    if (r != EBUSY) return r;  // acquired (or EOWNERDEAD/EINVAL, as lock would say)
  }
  FR_TIMED("pthread_mutex_lock", real(mutex));
}
