// Seccomp state: see seccomp_state.h.
#include "preload/runtime/seccomp_state.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "preload/crash/raw_syscall.h"
#include "preload/fds/fd_guard.h"
#include "preload/runtime/log.h"

namespace flightrec {

std::atomic<bool> g_seccomp_filtered{false};

namespace {
std::atomic<unsigned> g_fd_table_size_seen{0};  // FdTableSizeSeen
}  // namespace

void NoteSeccompFilter(const char* how) {
  if (g_seccomp_filtered.exchange(true, std::memory_order_acq_rel)) return;
  Log(LogLevel::kInfo,
      "a seccomp filter is in force (%s): the recorder no longer calls process_vm_readv "
      "(its memory reads go through rt_sigprocmask probes and pipes)",
      how);
}

void CheckSeccompStatus() {
  if (SeccompFiltered()) return;
  // A transient descriptor of ours (fd_guard.h): the program's close-all
  // storm (close_range, closefrom) must not close it between our open and
  // close and hand its number to the program's next socket, which our close
  // would then close (test_a_storm_of_close_everything...: 42 of 66,432
  // rounds hit under ASan when this was a raw open and close, every tick).
  const int saved = errno;
  const int fd = OpenTransientFd("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    errno = saved;
    return;
  }
  char buf[4096];
  long n = RawSyscall6(SYS_read, fd, reinterpret_cast<long>(buf), sizeof(buf) - 1, 0, 0, 0);
  CloseTransientFd(fd);
  errno = saved;
  if (n <= 0) return;
  buf[n] = '\0';
  if (const char* fd_size = strstr(buf, "\nFDSize:")) {
    fd_size += sizeof("\nFDSize:") - 1;
    while (*fd_size == ' ' || *fd_size == '\t') fd_size++;
    unsigned v = 0;
    while (*fd_size >= '0' && *fd_size <= '9' && v < (1u << 28)) v = v * 10 + static_cast<unsigned>(*fd_size++ - '0');
    g_fd_table_size_seen.store(v, std::memory_order_relaxed);
  }
  const char* field = strstr(buf, "\nSeccomp:");
  if (!field) return;
  field += sizeof("\nSeccomp:") - 1;
  while (*field == ' ' || *field == '\t') field++;
  // 0 disabled, 1 strict, 2 filter.
  if (*field == '1' || *field == '2') NoteSeccompFilter("/proc/self/status says so");
}

unsigned FdTableSizeSeen() { return g_fd_table_size_seen.load(std::memory_order_relaxed); }

}  // namespace flightrec
