// File-size limit guard: see fsize_guard.h.
#include "format/fsize_guard.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace flightrec::format {
namespace {

// The raw rt_sigprocmask: not the program's (nor our) pthread_sigmask hook,
// and the kernel's 8-byte set.
void SetMask(int how, const sigset_t* set, sigset_t* old) { syscall(SYS_rt_sigprocmask, how, set, old, 8); }

bool XfszPending() {
  sigset_t pending;
  sigemptyset(&pending);
  if (syscall(SYS_rt_sigpending, &pending, 8) != 0) return false;
  return sigismember(&pending, SIGXFSZ) == 1;
}

// Runs `call` with SIGXFSZ blocked; a SIGXFSZ the call raised (and only
// that one) is taken back before the mask is restored.
template <typename Call>
ssize_t WithXfszBlocked(Call call) {
  sigset_t xfsz, old;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  SetMask(SIG_BLOCK, &xfsz, &old);
  const bool was_pending = XfszPending();
  const ssize_t r = call();
  const int err = errno;
  if (r < 0 && err == EFBIG && !was_pending && XfszPending()) {
    const timespec zero{0, 0};
    syscall(SYS_rt_sigtimedwait, &xfsz, nullptr, &zero, 8);
  }
  SetMask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return r;
}

}  // namespace

uint64_t FileSizeLimit() {
  const int saved = errno;
  rlimit lim{};
  const bool known = syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, nullptr, &lim) == 0;
  errno = saved;
  if (!known || lim.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return static_cast<uint64_t>(lim.rlim_cur);
}

ssize_t WriteWithoutSigxfsz(int fd, const void* buf, size_t n) {
  return WithXfszBlocked([&] { return static_cast<ssize_t>(syscall(SYS_write, fd, buf, n)); });
}

ssize_t PwriteWithoutSigxfsz(int fd, const void* buf, size_t n, off_t offset) {
  return WithXfszBlocked([&] { return static_cast<ssize_t>(syscall(SYS_pwrite64, fd, buf, n, offset)); });
}

}  // namespace flightrec::format
