// Budget tally: see budget_tally.h.
#include "preload/flush/budget_tally.h"

#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "format/fsize_guard.h"
#include "preload/fds/fd_guard.h"
#include "preload/flush/segment_files.h"
#include "preload/runtime/clock.h"

namespace flightrec {
namespace {

// The tally file's whole content. Anything else (short, another magic) is
// "unknown": a full scan rebuilds it.
struct Tally {
  char magic[8];
  uint64_t bytes;         // segment bytes counted since (and by) the last full scan
  uint64_t last_scan_ns;  // CLOCK_REALTIME of the last full scan
};
constexpr char kMagic[8] = {'F', 'R', 'B', 'U', 'D', 'G', '1', '\0'};

// The flock, tried without waiting: a seal never stalls an exiting process
// behind another one's scan for more than ~1 ms.
bool LockBriefly(int fd) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    SleepNs(200 * 1000);
  }
  return false;
}

}  // namespace

uint64_t AccountSealedSegment(int dir_fd, uint64_t max_bytes, uint64_t sealed_bytes, uint64_t realtime_ns) {
  const int fd = OpenTransientFdAt(dir_fd, kBudgetTallyName, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
  if (fd < 0) return EnforceDiskBudgetAt(dir_fd, max_bytes, "");  // no tally here: scan, as before
  if (!LockBriefly(fd)) {
    CloseTransientFd(fd);
    return 0;
  }
  Tally t;
  const bool known = pread(fd, &t, sizeof(t), 0) == static_cast<ssize_t>(sizeof(t)) &&
                     memcmp(t.magic, kMagic, sizeof(kMagic)) == 0 && t.last_scan_ns <= realtime_ns;
  uint64_t deleted = 0;
  if (known && t.bytes + sealed_bytes <= max_bytes && realtime_ns - t.last_scan_ns < kBudgetRescanNs) {
    t.bytes += sealed_bytes;
  } else {
    // Over the budget: delete down to 15/16 of it, so the next scan is a
    // sixteenth of the budget of new segments away (a directory held at its
    // budget would otherwise be scanned at every seal).
    const bool over = known && t.bytes + sealed_bytes > max_bytes;
    uint64_t total = known ? t.bytes + sealed_bytes : sealed_bytes;
    deleted = EnforceDiskBudgetAt(dir_fd, over ? max_bytes - max_bytes / 16 : max_bytes, "", &total);
    memcpy(t.magic, kMagic, sizeof(kMagic));
    t.bytes = total;
    t.last_scan_ns = realtime_ns;
  }
  // A short or failed write leaves an unknown tally: the next seal scans.
  // Never past RLIMIT_FSIZE, never SIGXFSZ (fsize_guard.h).
  if (format::FileSizeAllows(sizeof(t))) (void)!format::PwriteWithoutSigxfsz(fd, &t, sizeof(t), 0);
  CloseTransientFd(fd);  // releases the flock
  return deleted;
}

}  // namespace flightrec
