// Own descriptor table: see own_fd_table.h.
#include "preload/fds/own_fd_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "format/own_fds.h"
#include "preload/fds/fd_guard.h"
#include "preload/runtime/seccomp_state.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

namespace flightrec {
namespace {

std::atomic<bool> g_flush_table_own{false};
// The program's process, as a pidfd in the own table (BorrowProgramFd).
int g_pidfd = -1;

// pidfd_getfd came with Linux 5.6.
bool KernelHasPidfdGetfd() {
  utsname u;
  if (uname(&u) != 0) return false;
  char* end = nullptr;
  const long major = strtol(u.release, &end, 10);
  const long minor = end && *end == '.' ? strtol(end + 1, nullptr, 10) : 0;
  return major > 5 || (major == 5 && minor >= 6);
}

bool IsKept(int fd, const int* keep, int n) {
  for (int i = 0; i < n; i++)
    if (keep[i] == fd) return true;
  return false;
}

// Closes every descriptor of this (just copied) table but the kept ones:
// one close_range per stretch between them (raw: our hook is the program's
// bulk close, and these are not the program's closes). kept is ascending.
bool CloseAllBut(const int* keep, int n) {
  unsigned lo = 0;
  for (int i = 0; i <= n; i++) {
    const unsigned hi = i < n ? static_cast<unsigned>(keep[i]) : ~0U;
    if (hi > lo && syscall(SYS_close_range, lo, hi == ~0U ? ~0U : hi - 1, 0) != 0) {
      if (errno != ENOSYS) return false;
      // Linux 5.6-5.8: list this thread's table and close one by one.
      const int dir =
          static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/thread-self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (dir < 0) return false;
      alignas(8) char buf[2048];
      for (;;) {
        const long got = syscall(SYS_getdents64, dir, buf, sizeof(buf));
        if (got <= 0) break;
        for (long off = 0; off < got;) {
          auto* d = reinterpret_cast<dirent64*>(buf + off);
          off += d->d_reclen;
          if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
          const int fd = atoi(d->d_name);
          if (fd != dir && !IsKept(fd, keep, n)) syscall(SYS_close, fd);
        }
      }
      syscall(SYS_close, dir);
      return true;
    }
    if (hi == ~0U) break;
    lo = hi + 1;
  }
  return true;
}

}  // namespace

bool TakeOwnFdTable(const char** why_not) {
#if defined(__SANITIZE_THREAD__)
  *why_not = "a TSan build (TSan tracks descriptors by number across threads)";
  return false;
#endif
  if (SeccompFiltered()) {
    *why_not = "a seccomp filter may be in force";
    return false;
  }
  if (!KernelHasPidfdGetfd()) {
    *why_not = "the kernel is older than 5.6 (no pidfd_getfd)";
    return false;
  }
  // Ours in the program's table (a pinned output directory): the copies
  // stay ours in the new one. Read before the unshare; a number that stops
  // being ours meanwhile was closed by us, and its copy is ours too.
  int keep[64];
  const int n = ProgramTableProtectedFds(keep, 64);
  if (n < 0) {
    *why_not = "more than 64 descriptors of ours in the program's table";
    return false;
  }
  if (syscall(SYS_unshare, CLONE_FILES) != 0) {
    *why_not = "unshare(CLONE_FILES) refused";
    return false;
  }
  format::t_own_fd_table = true;
  ForgetOwnTableMarks();
  // Copies of the program's files must not outlive its own closes (a pipe
  // whose reader waits for EOF, a socket whose peer waits for the close).
  CloseAllBut(keep, n);
  for (int i = 0; i < n; i++)
    if (fcntl(keep[i], F_GETFD) != -1) ProtectFd(keep[i]);
  // 0-2 hold /dev/null: nothing of ours lands there, and whatever writes to
  // stderr by number on this thread (a library's message) goes nowhere
  // rather than into a segment.
  for (int fd = 0; fd <= 2; fd++) {
    if (IsKept(fd, keep, n)) continue;
    const int got = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC));
    if (got >= 0 && got != fd) {
      syscall(SYS_dup3, got, fd, O_CLOEXEC);
      syscall(SYS_close, got);
    }
  }
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
  g_pidfd = pidfd >= 0 ? MoveToOwnFdRange(pidfd) : -1;
  g_flush_table_own.store(true, std::memory_order_release);
  return true;
}

bool FlushThreadHasOwnFdTable() { return g_flush_table_own.load(std::memory_order_acquire); }

void OwnFdTableAfterForkChild() {
  g_flush_table_own.store(false, std::memory_order_relaxed);
  g_pidfd = -1;
}

int BorrowProgramFd(int fd) {
  if (!format::t_own_fd_table || g_pidfd < 0 || SeccompFiltered()) return -1;
  const int saved = errno;
  const int copy = static_cast<int>(syscall(SYS_pidfd_getfd, g_pidfd, fd, 0));
  errno = saved;
  return copy;
}

bool ProgramTableReachable() {
  if (!format::t_own_fd_table) return true;
  if (g_pidfd < 0 || SeccompFiltered()) return false;
  // The main thread's state in /proc/self/stat: a zombie (Z) or dead (X)
  // leader has no table left for pidfd_getfd to read.
  const int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/self/stat", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return false;
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* paren = strrchr(buf, ')');
  return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

ProgramFd::ProgramFd(int fd) : fd_(fd), borrowed_(format::t_own_fd_table) {
  if (borrowed_) fd_ = fd >= 0 ? BorrowProgramFd(fd) : -1;
}

ProgramFd::~ProgramFd() {
  if (borrowed_ && fd_ >= 0) {
    const int saved = errno;
    syscall(SYS_close, fd_);
    errno = saved;
  }
}

}  // namespace flightrec
