// Segment file tests: names that sort by time and carry service and pid,
// output-directory refusals, and the disk budget (oldest sealed first, never
// the active file, never a segment someone holds locked).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <string>

#include "format/segment_writer.h"
#include "preload/flush/segment_files.h"
#include "preload/flush/writer_liveness.h"
#include "preload/runtime/utc_stamp.h"

using namespace flightrec;

namespace {
std::string TempDir() {
  char tmpl[] = "/tmp/fr-segfiles-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}
void WriteFile(const std::string& path, size_t bytes) {
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  std::string data(bytes, 'x');
  REQUIRE(write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()));
  close(fd);
}
bool Exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }
}  // namespace

TEST_CASE("segment files: names sort by time and carry service and pid") {
  const uint64_t t1 = 1764480000ull * 1000000000ull + 5000000ull;  // 2025-11-30T05:20:00.005Z
  const std::string a = ActiveSegmentPath("/d", "my-svc/1", 42, 3, t1);
  CHECK(a == "/d/20251130T052000.005Z-my_svc_1-42-0003.active");
  const std::string b = ActiveSegmentPath("/d", "my-svc/1", 42, 4, t1 + 1000000000ull);
  CHECK(a < b);
  CHECK(SealedSegmentPath(a) == "/d/20251130T052000.005Z-my_svc_1-42-0003.seg");
  CHECK(ActiveSegmentPath("/d", "", 1, 0, t1).find("-unknown-1-0000.active") != std::string::npos);
}

TEST_CASE("segment files: output directory is created 0700 and checked") {
  const std::string root = TempDir();
  std::string err;
  const std::string dir = root + "/a/b";
  REQUIRE(PrepareOutputDirectory(dir, false, &err));
  struct stat st;
  REQUIRE(stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);

  CHECK_FALSE(PrepareOutputDirectory("relative/dir", false, &err));
  CHECK(err.find("not an absolute path") != std::string::npos);

  REQUIRE(symlink(dir.c_str(), (root + "/link").c_str()) == 0);
  CHECK_FALSE(PrepareOutputDirectory(root + "/link", false, &err));
  CHECK(err.find("symlink") != std::string::npos);

  WriteFile(root + "/file", 1);
  CHECK_FALSE(PrepareOutputDirectory(root + "/file", false, &err));
  CHECK(err.find("not a directory") != std::string::npos);

  if (geteuid() == 0) {  // only root can hand a directory to another user
    const std::string foreign = root + "/foreign";
    REQUIRE(mkdir(foreign.c_str(), 0700) == 0);
    REQUIRE(chown(foreign.c_str(), 65534, 65534) == 0);
    CHECK_FALSE(PrepareOutputDirectory(foreign, false, &err));
    CHECK(err.find("owned by uid 65534") != std::string::npos);
    CHECK(PrepareOutputDirectory(foreign, true, &err));
  }
  std::string cmd = "rm -rf " + root;
  CHECK(system(cmd.c_str()) == 0);
}

TEST_CASE("segment files: disk budget deletes the oldest sealed segments first") {
  const std::string dir = TempDir();
  const std::string s1 = dir + "/20250101T000001.000Z-svc-1-0000.seg";
  const std::string s2 = dir + "/20250101T000002.000Z-svc-1-0001.seg";
  const std::string s3 = dir + "/20250101T000003.000Z-svc-2-0000.seg";
  const std::string act = dir + "/20250101T000000.000Z-svc-3-0000.active";
  const std::string other = dir + "/notes.txt";
  for (const auto& p : {s1, s2, s3, act}) WriteFile(p, 1000);
  WriteFile(other, 5000);
  // s1 is being uploaded by someone holding its lock: it must survive.
  int locked = open(s1.c_str(), O_RDONLY);
  REQUIRE(locked >= 0);
  REQUIRE(flock(locked, LOCK_EX) == 0);
  // 4000 bytes of segments, budget 2500: two sealed ones must go, s1 is locked.
  CHECK(EnforceDiskBudget(dir, 2500, act) == 2);
  CHECK(Exists(s1));
  CHECK_FALSE(Exists(s2));
  CHECK_FALSE(Exists(s3));
  CHECK(Exists(act));
  CHECK(Exists(other));  // not ours
  close(locked);
  CHECK(EnforceDiskBudget(dir, 1500, act) == 1);
  CHECK_FALSE(Exists(s1));
  std::string cmd = "rm -rf " + dir;
  CHECK(system(cmd.c_str()) == 0);
}

// An .active file as a writer leaves it: a header naming pid and identity
// (SPEC.md 3), then `bytes` in all.
void WriteActive(const std::string& path, pid_t pid, const format::WriterIdentity& identity, size_t bytes) {
  {
    format::SegmentWriter w;
    format::SegmentHeaderInfo h;
    h.pid = static_cast<uint32_t>(pid);
    h.identity = identity;
    h.service = "svc";
    std::string err;
    REQUIRE_MESSAGE(w.Open(path, h, &err), err);
    w.Abandon();
  }
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  REQUIRE(static_cast<size_t>(st.st_size) < bytes);
  int fd = open(path.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  std::string pad(bytes - static_cast<size_t>(st.st_size), 'x');
  REQUIRE(write(fd, pad.data(), pad.size()) == static_cast<ssize_t>(pad.size()));
  close(fd);
}
void SetAge(const std::string& path, time_t seconds) {
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= seconds;
  ts[1] = ts[0];
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), ts, 0) == 0);
}

TEST_CASE("segment files: disk budget deletes the .active segments of dead processes, oldest first") {
  const std::string dir = TempDir();
  // A pid that is surely gone: a child that exited and was reaped.
  const pid_t dead = fork();
  REQUIRE(dead >= 0);
  if (dead == 0) _exit(0);
  REQUIRE(waitpid(dead, nullptr, 0) == dead);
  // A live one: a child that waits to be killed.
  const pid_t live = fork();
  REQUIRE(live >= 0);
  if (live == 0) {
    pause();
    _exit(0);
  }
  const format::WriterIdentity own = OwnWriterIdentity();
  REQUIRE(own.pid_ns != 0);
  REQUIRE(own.start_ticks != 0);
  format::WriterIdentity live_id = own, reused_id = own, dead_id = own, foreign_id = own, reboot_id = own;
  live_id.start_ticks = ProcessStartTicks(live);
  REQUIRE(live_id.start_ticks != 0);
  reused_id.start_ticks = live_id.start_ticks + 1;  // the writer that had `live`'s pid before it
  dead_id.start_ticks = own.start_ticks;
  foreign_id.pid_ns = own.pid_ns + 1;  // a container's writer: its pid means nothing here
  reboot_id.boot_id[0] ^= 0xff;        // from before a reboot, or another machine
  auto name = [&](int stamp, pid_t pid, const char* ext) {
    return dir + "/20250101T0000" + std::to_string(10 + stamp) + ".000Z-svc-" + std::to_string(pid) + "-0000." + ext;
  };
  const std::string stale = name(1, dead, "active");
  const std::string running = name(2, live, "active");
  const std::string reused = name(3, live, "active");
  const std::string mine = name(4, getpid(), "active");
  const std::string foreign_fresh = name(5, dead, "active");
  const std::string foreign_quiet = name(6, dead, "active");
  const std::string reboot_fresh = name(7, dead, "active");
  const std::string legacy_fresh = name(8, dead, "active");
  const std::string legacy_quiet = name(9, dead, "active");
  const std::string writing = name(10, dead, "active");
  const std::string sealed = name(11, live, "seg");
  const std::string current = name(12, getpid(), "active");
  WriteActive(stale, dead, dead_id, 1000);
  WriteActive(running, live, live_id, 1000);
  WriteActive(reused, live, reused_id, 1000);
  WriteActive(mine, getpid(), own, 1000);
  WriteActive(foreign_fresh, dead, foreign_id, 1000);
  WriteActive(foreign_quiet, dead, foreign_id, 1000);
  SetAge(foreign_quiet, 11 * 60);  // untouched for longer than a live writer ever is
  WriteActive(reboot_fresh, dead, reboot_id, 1000);
  WriteFile(legacy_fresh, 1000);  // no header: a writer of an older version (or not written yet)
  WriteFile(legacy_quiet, 1000);
  SetAge(legacy_quiet, 11 * 60);
  WriteActive(writing, dead, foreign_id, 1000);
  SetAge(writing, 11 * 60);
  WriteFile(sealed, 1000);
  WriteActive(current, getpid(), own, 1000);
  // A writer in the middle of a write holds a shared flock on its file.
  const int lock_fd = open(writing.c_str(), O_RDONLY);
  REQUIRE(lock_fd >= 0);
  REQUIRE(flock(lock_fd, LOCK_SH) == 0);
  // The budget counts allocated blocks (a 1000-byte file takes a block).
  // Twelve files, budget eight and a half: the oldest deletable ones go, the
  // sealed one not reached: the dead process's, the one whose pid was reused
  // since, the quiet foreign one and the quiet one without a header whose
  // pid is gone.
  struct stat block_st;
  REQUIRE(stat(stale.c_str(), &block_st) == 0);
  const uint64_t per_file = static_cast<uint64_t>(block_st.st_blocks) * 512;
  REQUIRE(per_file >= 1000);
  CHECK(EnforceDiskBudget(dir, 8 * per_file + per_file / 2, current) == 4);
  CHECK_FALSE(Exists(stale));
  CHECK_FALSE(Exists(reused));
  CHECK_FALSE(Exists(foreign_quiet));
  CHECK_FALSE(Exists(legacy_quiet));
  CHECK(Exists(sealed));
  // However small the budget, nothing else but the sealed one may go.
  CHECK(EnforceDiskBudget(dir, 0, current) == 1);
  CHECK_FALSE(Exists(sealed));
  for (const auto& kept : {running, mine, foreign_fresh, reboot_fresh, legacy_fresh, writing, current})
    CHECK_MESSAGE(Exists(kept), kept);
  close(lock_fd);
  // Once the write is over (no flock), a quiet foreign file goes too.
  CHECK(EnforceDiskBudget(dir, 0, current) == 1);
  CHECK_FALSE(Exists(writing));
  kill(live, SIGKILL);
  waitpid(live, nullptr, 0);
  // The process is gone now: its file goes.
  CHECK(EnforceDiskBudget(dir, 0, current) == 1);
  CHECK_FALSE(Exists(running));
  std::string cmd = "rm -rf " + dir;
  CHECK(system(cmd.c_str()) == 0);
}

TEST_CASE("UtcStamp: the same calendar as gmtime_r, leap days and century years included") {
  // Days since the epoch: leap days of 1972, 2000 and 2100 (not leap), up to
  // 2517 (nanoseconds since 1970 fit 64 bits until 2554).
  const int64_t days[] = {0, 59, 60, 365, 10956, 11016, 11017, 11322, 20424, 20454, 47541, 47540, 47482, 200000};
  for (int64_t d : days) {
    for (uint64_t sod : {0ull, 1ull, 3599ull, 43210ull, 86399ull}) {
      const uint64_t secs = static_cast<uint64_t>(d) * 86400 + sod;
      const uint64_t ns = secs * 1000000000ull + 987654321ull;
      const time_t t = static_cast<time_t>(secs);
      struct tm tm;
      REQUIRE(gmtime_r(&t, &tm) != nullptr);
      char want[48];
      snprintf(want, sizeof(want), "%04d%02d%02dT%02d%02d%02d.987Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
               tm.tm_hour, tm.tm_min, tm.tm_sec);
      CHECK(flightrec::UtcStamp(ns) == want);
    }
  }
}
