// Address-space room for the recorder (see address_space.h).
#include "preload/heap/address_space.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

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

bool LimitRoom(int resource, uint64_t used) {
  rlimit lim{};
  if (getrlimit(resource, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return true;
  return AddressSpaceRoomFor(lim.rlim_cur, used);
}

}  // namespace

bool AddressSpaceRoomFor(uint64_t limit, uint64_t used) {
  if (limit == RLIM_INFINITY) return true;
  if (used >= limit) return false;
  return limit - used >= 2 * kRecorderAddressSpace;
}

bool ProcessHasRoomForRecorder(const char** which) {
  uint64_t size = 0, data = 0;
  ReadStatm(&size, &data);
  if (!LimitRoom(RLIMIT_AS, size)) {
    *which = "RLIMIT_AS";
    return false;
  }
  if (!LimitRoom(RLIMIT_DATA, data)) {
    *which = "RLIMIT_DATA";
    return false;
  }
  return true;
}

}  // namespace flightrec
