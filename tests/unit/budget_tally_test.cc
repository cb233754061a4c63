// Budget tally tests: a seal counts its segment without scanning the output
// directory; the scan (and its deletions) comes when the tally passes the
// budget, when the last scan is old, and when the tally is missing or bad.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "preload/flush/budget_tally.h"

using namespace flightrec;

namespace {
constexpr uint64_t kSec = 1000000000ull;
constexpr uint64_t kNow = 1764480000ull * kSec;

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
  std::string Segment(int age, size_t bytes) const {
    const std::string name = "20250101T0000" + std::to_string(10 + age) + ".000Z-svc-1-0000.seg";
    const int f = openat(fd, name.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
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
  CHECK(AccountSealedSegment(d.fd, 5000, 3000, kNow) == 1);
  CHECK_FALSE(d.Has(a));
  CHECK(d.Has(b));
  CHECK(d.Has(kBudgetTallyName));
  // The tally holds 3000. A file that appears without a seal (what no
  // process counted) is not seen by seals that stay under the budget...
  const std::string c = d.Segment(2, 3000);
  CHECK(AccountSealedSegment(d.fd, 5000, 100, kNow + kSec) == 0);
  CHECK(AccountSealedSegment(d.fd, 5000, 100, kNow + 2 * kSec) == 0);
  CHECK(d.Has(b));
  CHECK(d.Has(c));
  // ... until the tally passes the budget: the scan deletes the oldest down
  // to 15/16 of it (6000 bytes on disk -> at most 4687).
  CHECK(AccountSealedSegment(d.fd, 5000, 2000, kNow + 3 * kSec) == 1);
  CHECK_FALSE(d.Has(b));
  CHECK(d.Has(c));
}

TEST_CASE("budget tally: an old last scan brings a scan, which finds what no seal counted") {
  Dir d;
  CHECK(AccountSealedSegment(d.fd, 5000, 0, kNow) == 0);  // the tally: 0 bytes, scanned now
  const std::string a = d.Segment(0, 3000), b = d.Segment(1, 3000);
  CHECK(AccountSealedSegment(d.fd, 5000, 10, kNow + kSec) == 0);  // counted 10 bytes: no scan
  CHECK(d.Has(a));
  CHECK(AccountSealedSegment(d.fd, 5000, 10, kNow + kBudgetRescanNs + kSec) == 1);
  CHECK_FALSE(d.Has(a));
  CHECK(d.Has(b));
  // A last scan in the future (a clock set back) is not trusted either.
  const std::string c = d.Segment(2, 3000);
  CHECK(AccountSealedSegment(d.fd, 5000, 10, kNow) == 1);
  CHECK_FALSE(d.Has(b));
}

TEST_CASE("budget tally: a damaged tally is rebuilt by a scan") {
  Dir d;
  CHECK(AccountSealedSegment(d.fd, 5000, 0, kNow) == 0);
  const std::string a = d.Segment(0, 3000), b = d.Segment(1, 3000);
  const int t = openat(d.fd, kBudgetTallyName, O_WRONLY | O_TRUNC);
  REQUIRE(t >= 0);
  REQUIRE(write(t, "junk", 4) == 4);
  close(t);
  CHECK(AccountSealedSegment(d.fd, 5000, 10, kNow + kSec) == 1);
  CHECK_FALSE(d.Has(a));
  // Rebuilt: the next seal under the budget counts without scanning.
  const std::string c = d.Segment(2, 3000);
  CHECK(AccountSealedSegment(d.fd, 5000, 10, kNow + 2 * kSec) == 0);
  CHECK(d.Has(b));
}

TEST_CASE("budget tally: a seal that cannot have the lock neither waits nor scans") {
  Dir d;
  CHECK(AccountSealedSegment(d.fd, 5000, 0, kNow) == 0);
  const std::string a = d.Segment(0, 9000);
  const int held = openat(d.fd, kBudgetTallyName, O_RDWR);
  REQUIRE(held >= 0);
  REQUIRE(flock(held, LOCK_EX) == 0);  // another sealer's scan in progress
  CHECK(AccountSealedSegment(d.fd, 5000, 9000, kNow + kSec) == 0);
  CHECK(d.Has(a));
  close(held);
  CHECK(AccountSealedSegment(d.fd, 5000, 10, kNow + 2 * kSec) == 0);  // that seal was not counted
  CHECK(AccountSealedSegment(d.fd, 5000, 5000, kNow + 3 * kSec) == 1);
  CHECK_FALSE(d.Has(a));
}
