// Output directory descriptor tests: the configured directory by path (opened
// per use, never held), the per-uid directory pinned before a privilege drop
// (created 0700 and handed to the uid; symlinks and foreign owners refused; a
// removed one reported), and the disk budget through a directory descriptor.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "preload/flush/output_dir.h"
#include "preload/flush/segment_files.h"

using namespace flightrec;

namespace {
std::string TempDir() {
  char tmpl[] = "/tmp/fr-outdir-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}
void RemoveTree(const std::string& dir) {
  const std::string cmd = "rm -rf " + dir;
  REQUIRE(system(cmd.c_str()) == 0);
}
struct stat StatOf(const std::string& path) {
  struct stat st {};
  REQUIRE(lstat(path.c_str(), &st) == 0);
  return st;
}
bool SameFile(int fd, const std::string& path) {
  struct stat a {
  }, b{};
  return fstat(fd, &a) == 0 && stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}
constexpr uid_t kNobody = 65534;
bool IsOpen(int fd) { return fcntl(fd, F_GETFD) >= 0; }
}  // namespace

TEST_CASE("output dir: the configured directory, created 0700, opened for one use") {
  const std::string root = TempDir();
  const std::string out = root + "/trace/out";
  std::string err;
  int used = -1;
  {
    OutputDir d;
    REQUIRE(OpenOutputDir(out, false, true, &d, &err));
    CHECK(d.path() == out);
    CHECK(SameFile(d.fd(), out));
    used = d.fd();
  }
  CHECK_FALSE(IsOpen(used));  // the application keeps its descriptors
  CHECK((StatOf(out).st_mode & 0777) == 0700);
  CHECK_FALSE(OutputDirPinned());
  // Removed: the next segment (prepare) creates it afresh; a seal does not.
  RemoveTree(out);
  {
    OutputDir d;
    CHECK_FALSE(OpenOutputDir(out, false, false, &d, &err));
    CHECK(errno == ENOENT);
  }
  {
    OutputDir d;
    REQUIRE(OpenOutputDir(out, false, true, &d, &err));
    CHECK(SameFile(d.fd(), out));
  }
  // A symlink in its place is refused, prepared or not.
  RemoveTree(out);
  REQUIRE(symlink(root.c_str(), out.c_str()) == 0);
  {
    OutputDir d;
    CHECK_FALSE(OpenOutputDir(out, false, true, &d, &err));
    CHECK(err.find("symlink") != std::string::npos);
    CHECK_FALSE(OpenOutputDir(out, false, false, &d, &err));
  }
  RemoveTree(root);
}

TEST_CASE("output dir: pinned per-uid directory for a privilege drop") {
  if (geteuid() != 0) return;  // only root can hand a directory to another uid
  const std::string out = TempDir();
  const std::string sub = out + "/" + UidDirName(kNobody);
  std::string err;
  REQUIRE(PinOutputDirForUid(out, false, kNobody, &err));
  CHECK(OutputDirPinned());
  const struct stat st = StatOf(sub);
  CHECK(S_ISDIR(st.st_mode));
  CHECK(st.st_uid == kNobody);
  CHECK((st.st_mode & 0777) == 0700);
  int pinned = -1;
  {
    OutputDir d;
    REQUIRE(OpenOutputDir(out, false, true, &d, &err));
    CHECK(d.path() == sub);
    CHECK(SameFile(d.fd(), sub));
    pinned = d.fd();
    // Files are made relative to the descriptor.
    const int f = openat(d.fd(), "x.active", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    REQUIRE(f >= 0);
    close(f);
    CHECK(access((sub + "/x.active").c_str(), F_OK) == 0);
  }
  CHECK(IsOpen(pinned));  // held: its path is unreachable once the uid changed
  // Removed: reported, not re-created through a path the process cannot reach.
  RemoveTree(sub);
  {
    OutputDir d;
    CHECK_FALSE(OpenOutputDir(out, false, true, &d, &err));
    CHECK(err.find("was removed") != std::string::npos);
  }
  // The drop failed: back to the configured directory.
  UnpinOutputDir();
  CHECK_FALSE(OutputDirPinned());
  CHECK_FALSE(IsOpen(pinned));
  {
    OutputDir d;
    REQUIRE(OpenOutputDir(out, false, true, &d, &err));
    CHECK(d.path() == out);
  }
  RemoveTree(out);
}

TEST_CASE("output dir: a planted symlink or a foreign per-uid directory is refused") {
  if (geteuid() != 0) return;
  const std::string out = TempDir();
  const std::string elsewhere = TempDir();
  const std::string sub = out + "/" + UidDirName(kNobody);
  REQUIRE(symlink(elsewhere.c_str(), sub.c_str()) == 0);
  std::string err;
  CHECK_FALSE(PinOutputDirForUid(out, false, kNobody, &err));
  CHECK_FALSE(OutputDirPinned());
  CHECK(StatOf(elsewhere).st_uid == 0);  // the symlink's target was not handed over
  REQUIRE(unlink(sub.c_str()) == 0);
  REQUIRE(mkdir(sub.c_str(), 0700) == 0);
  REQUIRE(chown(sub.c_str(), 12345, 12345) == 0);
  CHECK_FALSE(PinOutputDirForUid(out, false, kNobody, &err));
  CHECK(err.find("owned by uid 12345") != std::string::npos);
  CHECK_FALSE(OutputDirPinned());
  // One already handed to that uid (an earlier run) is used again, 0700.
  REQUIRE(chown(sub.c_str(), kNobody, 0) == 0);
  REQUIRE(chmod(sub.c_str(), 0755) == 0);
  REQUIRE(PinOutputDirForUid(out, false, kNobody, &err));
  CHECK((StatOf(sub).st_mode & 0777) == 0700);
  UnpinOutputDir();
  RemoveTree(out);
  RemoveTree(elsewhere);
}

TEST_CASE("output dir: the disk budget through a directory descriptor") {
  const std::string dir = TempDir();
  for (const char* name : {"20250101T000001.000Z-svc-1-0000.seg", "20250101T000002.000Z-svc-1-0001.seg",
                           "20250101T000003.000Z-svc-1-0002.active"}) {
    const int f = open((dir + "/" + name).c_str(), O_CREAT | O_WRONLY, 0600);
    REQUIRE(f >= 0);
    REQUIRE(ftruncate(f, 1000) == 0);
    close(f);
  }
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  CHECK(EnforceDiskBudgetAt(fd, 2000, "20250101T000003.000Z-svc-1-0002.active") == 1);
  CHECK(access((dir + "/20250101T000001.000Z-svc-1-0000.seg").c_str(), F_OK) != 0);
  CHECK(access((dir + "/20250101T000002.000Z-svc-1-0001.seg").c_str(), F_OK) == 0);
  CHECK(IsOpen(fd));  // still ours: the scan used a descriptor of its own
  close(fd);
  RemoveTree(dir);
}
