// Log: formats into a stack buffer and write(2)s one line to stderr.
#include "preload/runtime/log.h"

#include "format/fsize_guard.h"
#include "format/own_fds.h"
#include "preload/fds/own_fd_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>

namespace flightrec {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};

// Which file descriptor 2 was when the process started (InitLogTarget). A
// program started with stderr closed gets its next open() as fd 2, and one
// that closes stderr later may reuse the number for a data file or a socket:
// a line of ours written there would corrupt the program's data. So a line
// is written while fd 2 is still the file it was at start (one fstat per
// line; lines are rare), never if it was closed then, and after a change
// only where a log line belongs: a terminal, a pipe, or a file opened for
// appending (a daemon that sends stderr to its log), never a socket or a
// file the program writes in place.
std::atomic<bool> g_target_known{false};
std::atomic<bool> g_target_ok{true};  // before InitLogTarget: as it always was
dev_t g_target_dev;
ino_t g_target_ino;

// `fd` is the program's stderr, or this thread's copy of it.
bool StderrIsOurs(int fd) {
  if (!g_target_known.load(std::memory_order_acquire)) return g_target_ok.load(std::memory_order_relaxed);
  struct stat st;
  if (syscall(SYS_fstat, fd, &st) != 0) return false;
  if (st.st_dev == g_target_dev && st.st_ino == g_target_ino) return true;
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return true;
  if (!S_ISREG(st.st_mode)) return false;
  const long flags = syscall(SYS_fcntl, fd, F_GETFL);
  return flags >= 0 && (flags & O_APPEND);
}

void VLog(LogLevel level, const char* fmt, va_list ap) {
  if (static_cast<int>(level) > g_level.load(std::memory_order_relaxed)) return;
  const int saved_errno = errno;  // never disturb the host's errno
  char buf[1024];
  int n = snprintf(buf, sizeof(buf), "flightrec: ");
  int m = vsnprintf(buf + n, sizeof(buf) - static_cast<size_t>(n) - 1, fmt, ap);
  if (m < 0) m = 0;
  size_t len = static_cast<size_t>(n) + static_cast<size_t>(m);
  if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
  // One call, one line: control bytes from values we quote (paths, names
  // taken from the environment) must not break or colour the line.
  for (size_t i = 0; i < len; ++i)
    if (static_cast<unsigned char>(buf[i]) < 0x20 || buf[i] == 0x7f) buf[i] = '?';
  buf[len++] = '\n';
  // The raw call: never our own write hook (a stderr pipe that blocks would
  // otherwise be timed as the program's off-CPU time). A stderr file at its
  // RLIMIT_FSIZE loses the line rather than raise SIGXFSZ (fsize_guard.h).
  // A thread with a descriptor table of its own (own_fd_table.h) writes to
  // a copy of the program's stderr, taken for this line.
  int fd = STDERR_FILENO;
  if (format::t_own_fd_table && (fd = BorrowProgramFd(STDERR_FILENO)) < 0) {
    errno = saved_errno;
    return;
  }
  if (StderrIsOurs(fd)) format::WriteWithoutSigxfsz(fd, buf, len);
  if (fd != STDERR_FILENO) syscall(SYS_close, fd);
  errno = saved_errno;
}
}  // namespace

void InitLogTarget() {
  struct stat st;
  if (syscall(SYS_fstat, STDERR_FILENO, &st) == 0) {
    g_target_dev = st.st_dev;
    g_target_ino = st.st_ino;
    g_target_known.store(true, std::memory_order_release);
  } else {
    g_target_ok.store(false, std::memory_order_relaxed);  // closed at start: stay silent
  }
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

void Log(LogLevel level, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLog(level, fmt, ap);
  va_end(ap);
}

void LogOnce(bool* once_flag, LogLevel level, const char* fmt, ...) {
  if (__atomic_exchange_n(once_flag, true, __ATOMIC_RELAXED)) return;
  va_list ap;
  va_start(ap, fmt);
  VLog(level, fmt, ap);
  va_end(ap);
}

}  // namespace flightrec
