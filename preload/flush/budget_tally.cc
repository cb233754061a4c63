// Budget tally: see budget_tally.h.
#include "preload/flush/budget_tally.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "format/fsize_guard.h"
#include "preload/fds/fd_guard.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/config.h"
#include "preload/runtime/core_events.h"
#include "preload/runtime/log.h"

namespace flightrec {
namespace {

constexpr uint64_t kSec = 1000000000ull;

// The tally file's whole content (layout in budget_tally.h). Anything else
// (short, another magic) is "unknown": a full scan rebuilds it.
struct Tally {
  char magic[8];
  uint64_t bytes;         // allocated segment bytes counted since (and by) the last full scan
  uint64_t last_scan_ns;  // CLOCK_REALTIME of the last full scan
  uint64_t since_ns;      // CLOCK_REALTIME the totals below start from
  uint64_t deleted_segments, deleted_bytes, deleted_incidents;  // by the budget
  uint64_t expired_windows, expired_bytes;                      // window segments past the window
  uint64_t last_deletion_ns;                                    // CLOCK_REALTIME, 0 = none
};
constexpr char kMagic[8] = {'F', 'R', 'B', 'U', 'D', 'G', '2', '\0'};

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

BudgetRules BudgetRulesFromConfig() {
  const Config& cfg = GetConfig();
  BudgetRules rules;
  rules.max_bytes = cfg.max_disk_bytes;
  if (cfg.window_mode) rules.window_ns = std::max<uint64_t>(1, cfg.window_seconds) * kSec;
  return rules;
}

uint64_t AccountSealedSegment(int dir_fd, const BudgetRules& rules, uint64_t sealed_bytes, uint64_t realtime_ns,
                              const BudgetDeletions& freed, BudgetDeletions* deletions) {
  const uint64_t max_bytes = rules.max_bytes;
  const uint64_t expire_before = rules.window_ns && realtime_ns > rules.window_ns ? realtime_ns - rules.window_ns : 0;
  BudgetDeletions scan;
  const int fd = OpenTransientFdAt(dir_fd, kBudgetTallyName, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
  if (fd < 0) {  // no tally here: scan, as before
    const uint64_t n = EnforceDiskBudgetAt(dir_fd, max_bytes, "", nullptr, expire_before, &scan);
    if (deletions) *deletions = scan;
    return n;
  }
  if (!LockBriefly(fd)) {
    CloseTransientFd(fd);
    return 0;
  }
  Tally t;
  const bool known = pread(fd, &t, sizeof(t), 0) == static_cast<ssize_t>(sizeof(t)) &&
                     memcmp(t.magic, kMagic, sizeof(kMagic)) == 0 && t.last_scan_ns <= realtime_ns;
  if (!known) {
    memset(&t, 0, sizeof(t));
    memcpy(t.magic, kMagic, sizeof(kMagic));
    t.since_ns = realtime_ns;
  }
  // What this process deleted itself is no longer on disk.
  const uint64_t counted = (known ? t.bytes - std::min(t.bytes, freed.expired_bytes + freed.bytes) : 0) + sealed_bytes;
  const uint64_t rescan_ns = rules.window_ns ? std::min(kBudgetRescanNs, rules.window_ns) : kBudgetRescanNs;
  uint64_t deleted = 0;
  if (known && counted <= max_bytes && realtime_ns - t.last_scan_ns < rescan_ns) {
    t.bytes = counted;
  } else {
    // Over the budget: delete down to 15/16 of it, so the next scan is a
    // sixteenth of the budget of new segments away (a directory held at its
    // budget would otherwise be scanned at every seal).
    const bool over = known && counted > max_bytes;
    uint64_t total = counted;
    deleted =
        EnforceDiskBudgetAt(dir_fd, over ? max_bytes - max_bytes / 16 : max_bytes, "", &total, expire_before, &scan);
    t.bytes = total;
    t.last_scan_ns = realtime_ns;
  }
  t.deleted_segments += scan.segments + freed.segments;
  t.deleted_bytes += scan.bytes + freed.bytes;
  t.deleted_incidents += scan.incidents + freed.incidents;
  t.expired_windows += scan.expired_windows + freed.expired_windows;
  t.expired_bytes += scan.expired_bytes + freed.expired_bytes;
  if (scan.segments || scan.expired_windows || freed.segments || freed.expired_windows)
    t.last_deletion_ns = realtime_ns;
  // A short or failed write leaves an unknown tally: the next seal scans.
  // Never past RLIMIT_FSIZE, never SIGXFSZ (fsize_guard.h).
  if (format::FileSizeAllows(sizeof(t))) (void)!format::PwriteWithoutSigxfsz(fd, &t, sizeof(t), 0);
  CloseTransientFd(fd);  // releases the flock
  if (deletions) *deletions = scan;
  return deleted;
}

void ApplyDiskBudgetAfterSeal(int dir_fd, const std::string& sealed_name, const BudgetDeletions& freed) {
  struct stat st;
  const uint64_t sealed_bytes =
      fstatat(dir_fd, sealed_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ? AllocatedBytes(st) : 0;
  BudgetDeletions scan;
  AccountSealedSegment(dir_fd, BudgetRulesFromConfig(), sealed_bytes, RealtimeNs(), freed, &scan);
  if (scan.segments) {
    Log(LogLevel::kInfo, "disk budget: deleted %llu oldest segment(s), %llu bytes",
        static_cast<unsigned long long>(scan.segments), static_cast<unsigned long long>(scan.bytes));
    AddFooterDrop("segments.deleted_for_budget", scan.segments);
  }
  if (scan.incidents) {
    Log(LogLevel::kWarn,
        "disk budget: deleted %llu segment(s) of kept incidents: FLIGHTREC_MAX_DISK_BYTES is too small for what "
        "the directory keeps",
        static_cast<unsigned long long>(scan.incidents));
    AddFooterDrop("segments.incidents_deleted_for_budget", scan.incidents);
  }
  if (scan.expired_windows)
    Log(LogLevel::kDebug, "window: expired %llu window segment(s) of exited processes",
        static_cast<unsigned long long>(scan.expired_windows));
}

}  // namespace flightrec
