// Seccomp state: see seccomp_state.h.
#include "preload/runtime/seccomp_state.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "preload/crash/raw_syscall.h"
#include "preload/runtime/log.h"

namespace flightrec {

std::atomic<bool> g_seccomp_filtered{false};

void NoteSeccompFilter(const char* how) {
  if (g_seccomp_filtered.exchange(true, std::memory_order_acq_rel)) return;
  Log(LogLevel::kInfo, "a seccomp filter is in force (%s): the recorder no longer calls process_vm_readv "
      "(its memory reads go through rt_sigprocmask probes and pipes)", how);
}

void CheckSeccompStatus() {
  if (SeccompFiltered()) return;
  // Raw calls: no hook of ours, no errno change, and the descriptor lives
  // for two calls (a program's close-all loop cannot meet it in between
  // except by closing a number it never opened: harmless for a read-only
  // /proc file).
  const long fd = RawSyscall6(SYS_openat, AT_FDCWD, reinterpret_cast<long>("/proc/self/status"),
                              O_RDONLY | O_CLOEXEC, 0, 0, 0);
  if (fd < 0) return;
  char buf[4096];
  long n = RawSyscall6(SYS_read, fd, reinterpret_cast<long>(buf), sizeof(buf) - 1, 0, 0, 0);
  RawSyscall6(SYS_close, fd, 0, 0, 0, 0, 0);
  if (n <= 0) return;
  buf[n] = '\0';
  const char* field = strstr(buf, "\nSeccomp:");
  if (!field) return;
  field += sizeof("\nSeccomp:") - 1;
  while (*field == ' ' || *field == '\t') field++;
  // 0 disabled, 1 strict, 2 filter.
  if (*field == '1' || *field == '2') NoteSeccompFilter("/proc/self/status says so");
}

}  // namespace flightrec
