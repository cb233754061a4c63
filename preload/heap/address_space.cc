// Address-space room for the recorder (see address_space.h).
#include "preload/heap/address_space.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "preload/fds/fd_guard.h"

namespace flightrec {
namespace {

// Fields 1 (size) and 6 (data) of /proc/self/statm, in bytes. False when
// they cannot be read (then the limits are judged as if nothing were used).
bool ReadStatm(uint64_t* size, uint64_t* data) {
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[256];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  uint64_t fields[6] = {};
  int field = 0;
  for (const char* p = buf; *p && field < 6; ++p) {
    if (*p >= '0' && *p <= '9') {
      fields[field] = fields[field] * 10 + static_cast<uint64_t>(*p - '0');
    } else if (*p == ' ') {
      ++field;
    }
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  *size = fields[0] * page;
  *data = fields[5] * page;
  return true;
}

// The soft limit of `resource`, RLIM_INFINITY when it has none or cannot be read.
uint64_t SoftLimit(int resource) {
  rlimit lim{};
  if (getrlimit(resource, &lim) != 0) return RLIM_INFINITY;
  return lim.rlim_cur;
}

// vm.overcommit_memory is 2. Unreadable (no /proc): not known to be.
bool StrictOvercommit() {
  const int fd = OpenTransientFd("/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char c = 0;
  const ssize_t got = read(fd, &c, 1);
  CloseTransientFd(fd);
  return got == 1 && c == '2';
}

}  // namespace

bool UnwrittenMappingsAreCharged() {
  return SoftLimit(RLIMIT_AS) != RLIM_INFINITY || SoftLimit(RLIMIT_DATA) != RLIM_INFINITY || StrictOvercommit();
}

bool AddressSpaceRoomFor(uint64_t limit, uint64_t used) {
  if (limit == RLIM_INFINITY) return true;
  if (used >= limit) return false;
  return limit - used >= 2 * kRecorderAddressSpace;
}

bool ProcessHasRoomForRecorder(const char** which) {
  const uint64_t as_limit = SoftLimit(RLIMIT_AS), data_limit = SoftLimit(RLIMIT_DATA);
  // Nearly every process has neither limit: /proc/self/statm (an open, a
  // read and a close, ~40 us of a short-lived process's start on a VM,
  // issue #39) only when one is set.
  if (as_limit == RLIM_INFINITY && data_limit == RLIM_INFINITY) return true;
  uint64_t size = 0, data = 0;
  ReadStatm(&size, &data);
  if (!AddressSpaceRoomFor(as_limit, size)) {
    *which = "RLIMIT_AS";
    return false;
  }
  if (!AddressSpaceRoomFor(data_limit, data)) {
    *which = "RLIMIT_DATA";
    return false;
  }
  return true;
}

}  // namespace flightrec
