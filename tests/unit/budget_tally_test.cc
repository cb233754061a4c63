// Budget tally tests: a seal counts its segment without scanning the output
// directory; the scan (and its deletions) comes when the tally passes the
// budget, when the last scan is old, and when the tally is missing or bad.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "preload/flush/budget_tally.h"

using namespace flightrec;

namespace {
constexpr uint64_t kSec = 1000000000ull;
constexpr uint64_t kNow = 1764480000ull * kSec;

BudgetRules Budget(uint64_t max_bytes, uint64_t window_ns = 0) {
  BudgetRules r;
  r.max_bytes = max_bytes;
  r.window_ns = window_ns;
  return r;
}

// The tally's running totals (layout in budget_tally.h).
struct TallyFile {
  char magic[8];
  uint64_t bytes, last_scan_ns, since_ns, deleted_segments, deleted_bytes, deleted_incidents, expired_windows,
      expired_bytes, last_deletion_ns;
};
TallyFile ReadTally(int dir_fd) {
  TallyFile t{};
  const int f = openat(dir_fd, kBudgetTallyName, O_RDONLY);
  REQUIRE(f >= 0);
  REQUIRE(read(f, &t, sizeof(t)) == static_cast<ssize_t>(sizeof(t)));
  close(f);
  return t;
}

struct Dir {
  std::string path;
  int fd = -1;
  Dir() {
    char tmpl[] = "/tmp/fr-tally-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
    fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(fd >= 0);
  }
  ~Dir() {
    close(fd);
    (void)!system(("rm -rf " + path).c_str());
  }
  // A sealed segment whose name sorts by `age` (older first).
  std::string Segment(int age, size_t bytes, const std::string& tail = "-svc-1-0000.seg", mode_t mode = 0600) const {
    const std::string name = "20250101T0000" + std::to_string(10 + age) + ".000Z" + tail;
    const int f = openat(fd, name.c_str(), O_CREAT | O_WRONLY | O_TRUNC, mode);
    REQUIRE(f >= 0);
    const std::string data(bytes, 'x');
    REQUIRE(write(f, data.data(), data.size()) == static_cast<ssize_t>(data.size()));
    close(f);
    return name;
  }
  bool Has(const std::string& name) const { return faccessat(fd, name.c_str(), F_OK, 0) == 0; }
};
}  // namespace

TEST_CASE("budget tally: the first seal scans; later seals count without scanning") {
  Dir d;
  const std::string a = d.Segment(0, 3000), b = d.Segment(1, 3000);
  // No tally yet: a full scan, which finds 6000 bytes over a 5000 budget.
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 3000, kNow) == 1);
  CHECK_FALSE(d.Has(a));
  CHECK(d.Has(b));
  CHECK(d.Has(kBudgetTallyName));
  // The tally holds 3000. A file that appears without a seal (what no
  // process counted) is not seen by seals that stay under the budget...
  const std::string c = d.Segment(2, 3000);
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 100, kNow + kSec) == 0);
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 100, kNow + 2 * kSec) == 0);
  CHECK(d.Has(b));
  CHECK(d.Has(c));
  // ... until the tally passes the budget: the scan deletes the oldest down
  // to 15/16 of it (6000 bytes on disk -> at most 4687).
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 2000, kNow + 3 * kSec) == 1);
  CHECK_FALSE(d.Has(b));
  CHECK(d.Has(c));
}

TEST_CASE("budget tally: an old last scan brings a scan, which finds what no seal counted") {
  Dir d;
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 0, kNow) == 0);  // the tally: 0 bytes, scanned now
  const std::string a = d.Segment(0, 3000), b = d.Segment(1, 3000);
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 10, kNow + kSec) == 0);  // counted 10 bytes: no scan
  CHECK(d.Has(a));
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 10, kNow + kBudgetRescanNs + kSec) == 1);
  CHECK_FALSE(d.Has(a));
  CHECK(d.Has(b));
  // A last scan in the future (a clock set back) is not trusted either.
  const std::string c = d.Segment(2, 3000);
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 10, kNow) == 1);
  CHECK_FALSE(d.Has(b));
}

TEST_CASE("budget tally: a damaged tally is rebuilt by a scan") {
  Dir d;
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 0, kNow) == 0);
  const std::string a = d.Segment(0, 3000), b = d.Segment(1, 3000);
  const int t = openat(d.fd, kBudgetTallyName, O_WRONLY | O_TRUNC);
  REQUIRE(t >= 0);
  REQUIRE(write(t, "junk", 4) == 4);
  close(t);
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 10, kNow + kSec) == 1);
  CHECK_FALSE(d.Has(a));
  // Rebuilt: the next seal under the budget counts without scanning.
  const std::string c = d.Segment(2, 3000);
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 10, kNow + 2 * kSec) == 0);
  CHECK(d.Has(b));
}

TEST_CASE("budget tally: a seal that cannot have the lock neither waits nor scans") {
  Dir d;
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 0, kNow) == 0);
  const std::string a = d.Segment(0, 9000);
  const int held = openat(d.fd, kBudgetTallyName, O_RDWR);
  REQUIRE(held >= 0);
  REQUIRE(flock(held, LOCK_EX) == 0);  // another sealer's scan in progress
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 9000, kNow + kSec) == 0);
  CHECK(d.Has(a));
  close(held);
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 10, kNow + 2 * kSec) == 0);  // that seal was not counted
  CHECK(AccountSealedSegment(d.fd, Budget(5000), 5000, kNow + 3 * kSec) == 1);
  CHECK_FALSE(d.Has(a));
}

TEST_CASE("budget tally: what scans delete is kept in the tally, kept incidents last") {
  Dir d;
  // Blocks, not bytes: five 100-byte segments take five blocks (4 KiB each
  // on the filesystems here), far over a 10000-byte budget although their
  // bytes are 500.
  const std::string incident = d.Segment(0, 100, "-svc-1-0000@20250101T000010.000Z.seg");
  const std::string a = d.Segment(1, 100), b = d.Segment(2, 100), c = d.Segment(3, 100), e = d.Segment(4, 100);
  BudgetDeletions scan;
  CHECK(AccountSealedSegment(d.fd, Budget(10000), 100, kNow, {}, &scan) == 3);
  CHECK(d.Has(incident));  // the oldest, but kept: the windows go first
  CHECK_FALSE(d.Has(a));
  CHECK_FALSE(d.Has(b));
  CHECK_FALSE(d.Has(c));
  CHECK(d.Has(e));
  CHECK(scan.segments == 3);
  CHECK(scan.incidents == 0);
  CHECK(scan.bytes >= 3 * 100);
  TallyFile t = ReadTally(d.fd);
  CHECK(memcmp(t.magic, "FRBUDG2", 8) == 0);
  CHECK(t.deleted_segments == 3);
  CHECK(t.deleted_bytes == scan.bytes);
  CHECK(t.since_ns == kNow);
  CHECK(t.last_deletion_ns == kNow);
  // What a process deleted itself (its expired window) is recorded and no
  // longer counted.
  BudgetDeletions freed;
  freed.expired_windows = 1;
  freed.expired_bytes = t.bytes;
  CHECK(AccountSealedSegment(d.fd, Budget(10000), 0, kNow + kSec, freed) == 0);
  t = ReadTally(d.fd);
  CHECK(t.expired_windows == 1);
  CHECK(t.bytes == 0);
  CHECK(t.deleted_segments == 3);  // totals run on
  // A budget only incidents can meet: they go too, oldest first, and say so.
  const std::string f = d.Segment(5, 100, "-svc-2-0000@20250101T000015.000Z.seg");
  CHECK(AccountSealedSegment(d.fd, Budget(1), 0, kNow + kBudgetRescanNs + 2 * kSec, {}, &scan) == 3);
  CHECK(scan.incidents == 2);
  CHECK_FALSE(d.Has(incident));
  CHECK_FALSE(d.Has(f));
  t = ReadTally(d.fd);
  CHECK(t.deleted_segments == 6);
  CHECK(t.deleted_incidents == 2);
}

TEST_CASE("budget tally: window mode expires exited processes' windows at scans that come at least once a window") {
  Dir d;
  const pid_t dead = fork();
  REQUIRE(dead >= 0);
  if (dead == 0) _exit(0);
  REQUIRE(waitpid(dead, nullptr, 0) == dead);
  const std::string tail = "-svc-" + std::to_string(dead) + "-0000.seg";
  const std::string mine_tail = "-svc-" + std::to_string(getpid()) + "-0000.seg";
  const std::string orphan = d.Segment(0, 100, tail, 0400);
  const std::string live = d.Segment(1, 100, mine_tail, 0400);  // a live process expires its own
  const std::string sealed = d.Segment(2, 100, "-svc-" + std::to_string(dead) + "-0001.seg");  // not a window
  const uint64_t window = 5 * kSec;
  // Written "now" by the clock of the file system: within the window of a
  // scan at the real time, past it for a scan two windows later.
  const uint64_t real_now = static_cast<uint64_t>(time(nullptr)) * kSec;
  CHECK(AccountSealedSegment(d.fd, Budget(1 << 30, window), 0, real_now) == 0);  // first scan: nothing old
  CHECK(d.Has(orphan));
  // Under the budget, but a window after the last scan: the rescan period is
  // the window, and this scan finds the orphan past it.
  CHECK(AccountSealedSegment(d.fd, Budget(1 << 30, window), 0, real_now + window + 2 * kSec) == 1);
  CHECK_FALSE(d.Has(orphan));
  CHECK(d.Has(live));
  CHECK(d.Has(sealed));
  const TallyFile t = ReadTally(d.fd);
  CHECK(t.expired_windows == 1);
  CHECK(t.deleted_segments == 0);
}
