// Safe path walk tests (preload/flush/safe_path.h): symlinks followed only
// when root's or ours, relative and absolute targets, "..", directories
// others can write to refused unless sticky, the last component's policy.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "preload/fds/fd_guard.h"
#include "preload/flush/safe_path.h"

using namespace flightrec;

namespace {
constexpr uid_t kNobody = 65534;
std::string TempDir() {
  char tmpl[] = "/tmp/fr-safepath-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}
void RemoveTree(const std::string& dir) { REQUIRE(system(("rm -rf " + dir).c_str()) == 0); }
bool SameFile(int fd, const std::string& path) {
  struct stat a {
  }, b{};
  return fstat(fd, &a) == 0 && stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}
// Opens `path`; true if it leads to `expected`.
bool OpensAs(const std::string& path, const std::string& expected, bool create = false, bool foreign = false) {
  std::string err;
  const int fd = OpenDirectoryPathSafely(path, create, foreign, &err);
  const bool same = fd >= 0 && SameFile(fd, expected);
  if (fd < 0) MESSAGE(err);
  CloseTransientFd(fd);
  return same;
}
bool Refused(const std::string& path, const char* why, bool foreign = false) {
  std::string err;
  const int fd = OpenDirectoryPathSafely(path, false, foreign, &err);
  CloseTransientFd(fd);
  if (fd < 0 && err.find(why) == std::string::npos) MESSAGE(err);
  return fd < 0 && err.find(why) != std::string::npos;
}
}  // namespace

TEST_CASE("safe path: our own symlinks, relative and absolute, and '..' are followed") {
  const std::string root = TempDir();
  REQUIRE(mkdir((root + "/real").c_str(), 0700) == 0);
  REQUIRE(mkdir((root + "/real/out").c_str(), 0700) == 0);
  REQUIRE(symlink("real", (root + "/rel").c_str()) == 0);
  REQUIRE(symlink((root + "/real").c_str(), (root + "/abs").c_str()) == 0);
  CHECK(OpensAs(root + "/rel/out", root + "/real/out"));
  CHECK(OpensAs(root + "/abs/out", root + "/real/out"));
  CHECK(OpensAs(root + "/real/../real/./out/", root + "/real/out"));
  CHECK(OpensAs(root + "/abs/new/deeper", root + "/real/new/deeper", /*create=*/true));
  struct stat st {};
  REQUIRE(stat((root + "/real/new").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(Refused(root + "/rel", "is a symlink"));  // never as the last component
  CHECK(Refused("relative/x", "not an absolute path"));
  REQUIRE(symlink("loop", (root + "/loop").c_str()) == 0);
  CHECK(Refused(root + "/loop/x", "too many symlinks"));
  RemoveTree(root);
}

TEST_CASE("safe path: components other users control are refused") {
  if (geteuid() != 0) return;  // files of another user need root
  const std::string root = TempDir();
  REQUIRE(mkdir((root + "/target").c_str(), 0700) == 0);
  REQUIRE(mkdir((root + "/target/out").c_str(), 0700) == 0);
  REQUIRE(mkdir((root + "/shared").c_str(), 0700) == 0);
  REQUIRE(chmod((root + "/shared").c_str(), 01777) == 0);
  const std::string link = root + "/shared/link";
  REQUIRE(symlink((root + "/target").c_str(), link.c_str()) == 0);
  REQUIRE(lchown(link.c_str(), kNobody, kNobody) == 0);
  CHECK(Refused(link + "/out", "symlink owned by uid 65534"));
  REQUIRE(lchown(link.c_str(), 0, 0) == 0);
  CHECK(OpensAs(link + "/out", root + "/target/out"));  // root's own, in a sticky directory
  // A directory of another user's on the way, even 0755.
  REQUIRE(mkdir((root + "/theirs").c_str(), 0755) == 0);
  REQUIRE(mkdir((root + "/theirs/out").c_str(), 0700) == 0);
  REQUIRE(chown((root + "/theirs").c_str(), kNobody, kNobody) == 0);
  CHECK(Refused(root + "/theirs/out", "owned by uid 65534, neither root nor us", /*foreign=*/true));
  // World-writable on the way without the sticky bit.
  REQUIRE(mkdir((root + "/open").c_str(), 0700) == 0);
  REQUIRE(mkdir((root + "/open/out").c_str(), 0700) == 0);
  REQUIRE(chmod((root + "/open").c_str(), 0777) == 0);
  CHECK(Refused(root + "/open/out", "writable by other users and not sticky"));
  // The output directory itself: writable by others only if ours and sticky.
  REQUIRE(chmod((root + "/target/out").c_str(), 0777) == 0);
  CHECK(Refused(root + "/target/out", "is writable by other users"));
  REQUIRE(chmod((root + "/target/out").c_str(), 01777) == 0);
  CHECK(OpensAs(root + "/target/out", root + "/target/out"));
  REQUIRE(chown((root + "/target/out").c_str(), kNobody, kNobody) == 0);
  CHECK(Refused(root + "/target/out", "is writable by other users", /*foreign=*/true));
  REQUIRE(chmod((root + "/target/out").c_str(), 0700) == 0);
  CHECK(Refused(root + "/target/out", "owned by uid 65534, not us"));
  CHECK(OpensAs(root + "/target/out", root + "/target/out", false, /*foreign=*/true));
  RemoveTree(root);
}
