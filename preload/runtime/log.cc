// Log: formats into a stack buffer and write(2)s one line to stderr.
#include "preload/runtime/log.h"

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <unistd.h>

namespace flightrec {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};

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
  ssize_t w = write(STDERR_FILENO, buf, len);
  (void)w;
  errno = saved_errno;
}
}  // namespace

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
