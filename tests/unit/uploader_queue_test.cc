// Unit tests for the on-disk upload queue and the per-segment lock it shares
// with the runtime's disk-budget deleter.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "preload/flush/segment_files.h"
#include "uploader/segment_lock.h"
#include "uploader/upload_queue.h"

namespace fs = std::filesystem;
using namespace flightrec::uploader;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/flightrec-queue-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path, ec)) chmod(e.path().c_str(), 0600);
    fs::remove_all(path, ec);
  }
  std::string Write(const std::string& name, const std::string& data, mode_t mode = 0600) const {
    const std::string p = path + "/" + name;
    int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()));
    close(fd);
    chmod(p.c_str(), mode);
    return p;
  }
};

std::string SegName(int seq, const char* service = "svc") {
  char buf[96];
  snprintf(buf, sizeof(buf), "20240102T030405.%03dZ-%s-4242-%04d.seg", seq % 1000, service, seq);
  return buf;
}

std::vector<std::string> DrainNames(UploadQueue& q) {
  std::vector<std::string> names;
  PendingSegment s;
  while (q.PopOldest(&s)) names.push_back(s.name);
  return names;
}

// Tries the lock from another process (flock excludes across processes).
int LockResultInChild(const std::string& path) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = TryLockSegment(path.c_str());
    _exit(fd >= 0 ? 0 : (errno == EWOULDBLOCK ? 1 : 2));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("uploader_lock: one holder at a time, across descriptors and processes") {
  TempDir dir;
  const std::string seg = dir.Write(SegName(1), "data");
  int fd = TryLockSegment(seg.c_str());
  REQUIRE(fd >= 0);
  CHECK(TryLockSegment(seg.c_str()) == -1);  // a second open in this process is excluded too
  CHECK(errno == EWOULDBLOCK);
  CHECK(LockResultInChild(seg) == 1);
  CHECK_FALSE(TryDeleteSegment(seg.c_str()));  // the deleter never removes a file mid-upload
  CHECK(fs::exists(seg));
  UnlockSegment(fd);
  CHECK(LockResultInChild(seg) == 0);
  CHECK(TryDeleteSegment(seg.c_str()));
  CHECK_FALSE(fs::exists(seg));
  CHECK(TryLockSegment(seg.c_str()) == -1);
  CHECK(errno == ENOENT);
  // Not for FIFOs or symlinks planted under a segment name.
  const std::string fifo = dir.path + "/" + SegName(2);
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(TryLockSegment(fifo.c_str()) == -1);
  const std::string link = dir.path + "/" + SegName(3);
  REQUIRE(symlink("/etc/hostname", link.c_str()) == 0);
  CHECK(TryLockSegment(link.c_str()) == -1);
}

TEST_CASE("uploader_lock: the runtime's disk budget skips a segment we hold") {
  TempDir dir;
  const std::string oldest = dir.Write(SegName(1), std::string(4000, 'a'));
  const std::string newer = dir.Write(SegName(2), std::string(4000, 'b'));
  int fd = TryLockSegment(oldest.c_str());
  REQUIRE(fd >= 0);
  CHECK(flightrec::EnforceDiskBudget(dir.path, 4000, "") == 1);
  CHECK(fs::exists(oldest));  // held by the uploader: skipped
  CHECK_FALSE(fs::exists(newer));
  UnlockSegment(fd);
}

TEST_CASE("uploader_queue: scan finds pending sealed segments only, oldest first") {
  TempDir dir;
  dir.Write(SegName(3), "c");
  dir.Write(SegName(1), "a");
  dir.Write(SegName(2), "b");
  dir.Write("20240102T030405.000Z-svc-4242-0009.active", "active");
  dir.Write(SegName(4), "shipped", 0400);  // already uploaded and kept
  dir.Write(".hidden.seg", "x");
  dir.Write("notes.txt", "x");
  REQUIRE(mkdir((dir.path + "/" + SegName(5)).c_str(), 0700) == 0);
  UploadQueue q(dir.path + "/");
  std::string error;
  CHECK(q.Rescan(&error) == 3);
  CHECK(error.empty());
  CHECK(q.Rescan(&error) == 0);         // no duplicates
  q.Push(dir.path + "/" + SegName(2));  // already known: deduplicated
  q.Push("/elsewhere/" + SegName(7));   // not our directory: ignored
  q.Push(dir.path + "/x.active");       // not sealed: ignored
  CHECK(DrainNames(q) == std::vector<std::string>{SegName(1), SegName(2), SegName(3)});

  UploadQueue missing(dir.path + "/not-yet-created");
  CHECK(missing.Rescan(&error) == 0);
  CHECK(error.empty());  // the flush thread creates it later; not an error
}

TEST_CASE("uploader_queue: claim, finish (delete or keep read-only), release") {
  TempDir dir;
  const std::string a = dir.Write(SegName(1), "first");
  const std::string b = dir.Write(SegName(2), "second!");
  UploadQueue q(dir.path);
  std::string error;
  q.Rescan(&error);

  PendingSegment s;
  REQUIRE(q.PopOldest(&s));
  ClaimedSegment c;
  REQUIRE(q.Claim(s, &c) == ClaimStatus::kClaimed);
  CHECK(c.size == 5);
  CHECK(c.path == a);
  CHECK(LockResultInChild(a) == 1);  // held while we upload
  REQUIRE(q.Finish(&c, /*keep_local=*/false, &error));
  CHECK_FALSE(fs::exists(a));

  REQUIRE(q.PopOldest(&s));
  REQUIRE(q.Claim(s, &c) == ClaimStatus::kClaimed);
  REQUIRE(q.Finish(&c, /*keep_local=*/true, &error));
  struct stat st;
  REQUIRE(stat(b.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0400);
  CHECK(q.Rescan(&error) == 0);  // kept but shipped: never queued again
  CHECK(q.Claim(s, &c) == ClaimStatus::kShipped);

  const std::string d = dir.Write(SegName(3), "third");
  PendingSegment third{"", SegName(3)};
  REQUIRE(q.Claim(third, &c) == ClaimStatus::kClaimed);
  ClaimedSegment other;
  CHECK(q.Claim(third, &other) == ClaimStatus::kBusy);
  q.Release(&c);
  CHECK(fs::exists(d));
  CHECK(LockResultInChild(d) == 0);
  unlink(d.c_str());
  CHECK(q.Claim(third, &c) == ClaimStatus::kGone);
}

TEST_CASE("uploader_queue: uid-N names as output_dir makes them") {
  uid_t uid = 1;
  CHECK(UploadQueue::ParseUidDirName("uid-65534", &uid));
  CHECK(uid == 65534);
  CHECK(UploadQueue::ParseUidDirName("uid-0", &uid));
  CHECK(uid == 0);
  for (const char* bad :
       {"uid-", "uid-007", "uid-12a", "uid--1", "uid-4294967295", "uid-99999999999", "UID-5", "xuid-5", "uid-5/"})
    CHECK_MESSAGE(!UploadQueue::ParseUidDirName(bad, &uid), bad);
}

TEST_CASE("uploader_queue: root ships leftovers in OUTPUT/uid-N, one level, never through a symlink") {
  if (geteuid() != 0) {
    MESSAGE("skipped: needs root (directories of other uids)");
    return;
  }
  TempDir dir;
  auto subdir = [&](const std::string& name, uid_t owner) {
    const std::string p = dir.path + "/" + name;
    REQUIRE(mkdir(p.c_str(), 0700) == 0);
    REQUIRE(chown(p.c_str(), owner, owner) == 0);
    return name;
  };
  auto write_as = [&](const std::string& rel, uid_t owner, const std::string& data) {
    const std::string p = dir.Write(rel, data);
    REQUIRE(chown(p.c_str(), owner, owner) == 0);
    return p;
  };
  dir.Write(SegName(1), "top");
  const std::string worker = subdir("uid-4242", 4242);  // made by PinOutputDirForUid
  const std::string mine = write_as(worker + "/" + SegName(2), 4242, "worker's");
  const std::string same_name = write_as(worker + "/" + SegName(1), 4242, "same name, other directory");
  write_as(worker + "/" + SegName(3), 999, "someone else's file");
  write_as(worker + "/" + SegName(9), 4242, "shipped and kept");
  chmod((dir.path + "/" + worker + "/" + SegName(9)).c_str(), 0400);
  subdir(worker + "/uid-4242", 4242);  // two levels down: not looked at
  write_as(worker + "/uid-4242/" + SegName(4), 4242, "nested");
  subdir("uid-4343", 1000);  // neither root nor 4343
  write_as("uid-4343/" + SegName(5), 4343, "planted");
  subdir("uid-0077", 77);  // not a name we make
  write_as("uid-0077/" + SegName(6), 77, "odd name");
  TempDir elsewhere;
  elsewhere.Write(SegName(7), "behind a symlink");
  REQUIRE(symlink(elsewhere.path.c_str(), (dir.path + "/uid-4444").c_str()) == 0);
  dir.Write("uid-4545", "a file, not a directory");

  UploadQueue q(dir.path);
  std::string error;
  CHECK(q.Rescan(&error) == 4);
  CHECK(error.empty());
  std::vector<std::string> keys;
  for (PendingSegment s; q.PopOldest(&s);) keys.push_back(s.Key());
  CHECK(keys == std::vector<std::string>{SegName(1), worker + "/" + SegName(1), worker + "/" + SegName(2),
                                         worker + "/" + SegName(3)});

  // The seal hook's paths: uid-N subdirectories of ours only.
  q.Push(dir.path + "/" + worker + "/" + SegName(2));
  q.Push(dir.path + "/uid-x/" + SegName(8));
  q.Push(dir.path + "/" + worker + "/uid-4242/" + SegName(4));
  q.Push(elsewhere.path + "/uid-4242/" + SegName(8));
  PendingSegment s;
  REQUIRE(q.PopOldest(&s));
  CHECK(s.Key() == worker + "/" + SegName(2));
  CHECK_FALSE(q.PopOldest(&s));

  // A live worker shipping it holds the lock: root waits its turn.
  const int worker_lock = TryLockSegmentAt(AT_FDCWD, mine.c_str());
  REQUIRE(worker_lock >= 0);
  ClaimedSegment c;
  CHECK(q.Claim(s, &c) == ClaimStatus::kBusy);
  UnlockSegment(worker_lock);
  REQUIRE(q.Claim(s, &c) == ClaimStatus::kClaimed);
  CHECK(c.path == dir.path + "/" + worker + "/" + SegName(2));
  CHECK(c.size == 8);
  CHECK(LockResultInChild(mine) == 1);  // and now the worker would find it busy
  REQUIRE(q.Finish(&c, /*keep_local=*/false, &error));
  CHECK_FALSE(fs::exists(mine));
  CHECK(fs::exists(same_name));
  CHECK(q.Claim(PendingSegment{worker, SegName(3)}, &c) == ClaimStatus::kForeign);
  CHECK(q.Claim(PendingSegment{"uid-4343", SegName(5)}, &c) == ClaimStatus::kGone);  // directory refused
  CHECK(q.Claim(PendingSegment{"uid-4444", SegName(7)}, &c) == ClaimStatus::kGone);  // symlink refused
  REQUIRE(q.Claim(PendingSegment{worker, SegName(1)}, &c) == ClaimStatus::kClaimed);
  REQUIRE(q.Finish(&c, /*keep_local=*/true, &error));
  struct stat st;
  REQUIRE(stat(same_name.c_str(), &st) == 0);
  CHECK(((st.st_mode & 0777) == 0400 && st.st_uid == 4242));
  // Left: the top-level one it never claimed, and the foreign file (a claim refuses it again).
  CHECK(q.Rescan(&error) == 2);
  CHECK(DrainNames(q) == std::vector<std::string>{SegName(1), SegName(3)});
}

TEST_CASE("uploader_queue: a process that dropped root works in its uid-N through the descriptor") {
  TempDir dir;
  const std::string sub = "uid-" + std::to_string(geteuid());
  REQUIRE(mkdir((dir.path + "/" + sub).c_str(), 0700) == 0);
  dir.Write(SegName(1), "top: root's, out of reach now");
  const std::string a = dir.Write(sub + "/" + SegName(2), "pinned");
  dir.Write(sub + "/" + SegName(3), "pinned too");
  const int fd = open((dir.path + "/" + sub).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  UploadQueue q(dir.path);
  q.Push(dir.path + "/" + SegName(1));  // sealed before the drop
  CHECK_FALSE(q.UsePinnedDir(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC), "not-a-uid-dir"));
  REQUIRE(q.UsePinnedDir(fd, sub));
  CHECK(q.where() == dir.path + "/" + sub);
  // Paths out of reach from here on: move the whole tree away, as a dropped
  // process cannot enter OUTPUT any more.
  const std::string moved = dir.path + ".moved";
  REQUIRE(rename(dir.path.c_str(), moved.c_str()) == 0);
  struct Restore {
    std::string from, to;
    ~Restore() { rename(from.c_str(), to.c_str()); }
  } restore{moved, dir.path};
  std::string error;
  CHECK(q.Rescan(&error) == 2);  // uid-N only: OUTPUT is root's job
  CHECK(error.empty());
  q.Push(dir.path + "/" + sub + "/" + SegName(4));  // sealed after the drop (not on disk: gone)
  std::vector<std::string> keys;
  std::vector<ClaimStatus> claims;
  for (PendingSegment s; q.PopOldest(&s);) {
    keys.push_back(s.Key());
    ClaimedSegment c;
    claims.push_back(q.Claim(s, &c));
    if (claims.back() == ClaimStatus::kClaimed) {
      CHECK(c.path == dir.path + "/" + sub + "/" + s.name);  // messages name it as the user knows it
      REQUIRE(q.Finish(&c, /*keep_local=*/false, &error));
    }
  }
  CHECK(keys ==
        std::vector<std::string>{SegName(1), sub + "/" + SegName(2), sub + "/" + SegName(3), sub + "/" + SegName(4)});
  CHECK(claims ==
        std::vector<ClaimStatus>{ClaimStatus::kGone, ClaimStatus::kClaimed, ClaimStatus::kClaimed, ClaimStatus::kGone});
  CHECK(fs::exists(moved + "/" + SegName(1)));
  CHECK(fs::is_empty(moved + "/" + sub));
}

TEST_CASE("uploader_queue: outage backoff grows, is capped, and resets") {
  UploadQueue q("/tmp");
  constexpr uint64_t s = 1000000000ull;
  uint64_t w = q.OnFailure(Verdict::kRetry, 0, 0);
  CHECK(w >= s / 2);
  CHECK(w <= s);
  CHECK(q.next_attempt_ns() == w);
  uint64_t prev_ceiling = s;
  for (int i = 0; i < 10; i++) {
    w = q.OnFailure(Verdict::kRetry, 0, UINT64_MAX - static_cast<uint64_t>(i));
    CHECK(w <= 60 * s);
    CHECK(w >= prev_ceiling / 2);
    prev_ceiling = std::min<uint64_t>(prev_ceiling * 2, 60 * s);
  }
  CHECK(w >= 30 * s);  // reached the 60 s cap's band
  q.OnSuccess();
  CHECK(q.next_attempt_ns() == 0);
  CHECK(q.consecutive_failures() == 0);
  w = q.OnFailure(Verdict::kFatal, 100, 7);
  CHECK(w >= 15 * s);  // a rejected key is not retried every second
  CHECK(w <= 30 * s);
  CHECK(q.next_attempt_ns() == 100 + w);
}

TEST_SUITE("concurrency") {
  TEST_CASE("uploader_queue: pushes from several threads all arrive exactly once") {
    TempDir dir;
    UploadQueue q(dir.path);
    constexpr int kThreads = 4, kEach = 500;
    std::atomic<int> done{0};
    std::vector<std::thread> producers;
    for (int t = 0; t < kThreads; t++) {
      producers.emplace_back([&, t] {
        for (int i = 0; i < kEach; i++) q.Push(dir.path + "/" + SegName(t * kEach + i, "p"));
        done.fetch_add(1);
      });
    }
    std::set<std::string> seen;
    int duplicates = 0;
    PendingSegment s;
    while (done.load() < kThreads || q.size() > 0) {
      while (q.PopOldest(&s)) duplicates += seen.insert(s.name).second ? 0 : 1;
      std::this_thread::yield();
    }
    for (auto& th : producers) th.join();
    while (q.PopOldest(&s)) duplicates += seen.insert(s.name).second ? 0 : 1;
    CHECK(duplicates == 0);
    CHECK(seen.size() == static_cast<size_t>(kThreads * kEach));
  }
}
