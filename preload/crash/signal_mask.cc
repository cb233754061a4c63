// The real pthread_sigmask (see signal_mask.h). Kept out of the hook files so
// the unit tests, which link the recorder without its interposers, have it.
#include "preload/crash/signal_mask.h"

#include <dlfcn.h>
#include <errno.h>

#include <atomic>

namespace flightrec {

int RealPthreadSigmask(int how, const sigset_t* set, sigset_t* old) {
  using Fn = int (*)(int, const sigset_t*, sigset_t*);
  static std::atomic<Fn> real{nullptr};
  Fn fn = real.load(std::memory_order_acquire);
  if (!fn) {
    fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_sigmask"));
    if (!fn) return ENOSYS;
    real.store(fn, std::memory_order_release);
  }
  return fn(how, set, old);
}

}  // namespace flightrec
