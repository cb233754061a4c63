// The fd guard's transient files (preload/fds/fd_guard.h): protected while the
// recorder reads them, and never closed once the program took the number
// over. The close hooks that honour the protection are covered end to end
// by tests/integration/test_sockets_misc.py (closeall).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "preload/fds/fd_guard.h"

using namespace flightrec;

namespace {
bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }
}  // namespace

TEST_CASE("fd guard: a transient file is protected while open, and really closed after") {
  const int fd = OpenTransientFd("/proc/self/maps", O_RDONLY);
  REQUIRE(fd >= 0);
  CHECK(IsProtectedFd(fd));
  CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);  // close-on-exec even when not asked
  char c;
  CHECK(read(fd, &c, 1) == 1);
  CloseTransientFd(fd);
  CHECK_FALSE(IsProtectedFd(fd));
  CHECK_FALSE(IsOpen(fd));
}

TEST_CASE("fd guard: a failed transient open keeps open's errno and protects nothing") {
  errno = 0;
  CHECK(OpenTransientFd("/nonexistent/flightrec-test", O_RDONLY) == -1);
  CHECK(errno == ENOENT);
  CloseTransientFd(-1);  // harmless
}

TEST_CASE("fd guard: a file kept open is protected, close-on-exec, and really closed after") {
  const int fd = OpenOwnFdAt(AT_FDCWD, "/dev/null", O_RDONLY);
  REQUIRE(fd > 2);
  CHECK(IsProtectedFd(fd));
  CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  CloseTransientFd(fd);
  CHECK_FALSE(IsProtectedFd(fd));
  CHECK_FALSE(IsOpen(fd));
  errno = 0;
  CHECK(OpenOwnFdAt(AT_FDCWD, "/nonexistent/flightrec-test", O_RDONLY) == -1);
  CHECK(errno == ENOENT);
}

TEST_CASE("fd guard: a directory stream on a transient descriptor is closed whole") {
  const int fd = OpenTransientFdAt(AT_FDCWD, "/", O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  DIR* d = fdopendir(fd);
  REQUIRE(d != nullptr);
  CHECK(IsProtectedFd(fd));  // still ours while listed
  CHECK(readdir(d) != nullptr);
  CloseTransientDir(d);
  CHECK_FALSE(IsProtectedFd(fd));
  CHECK_FALSE(IsOpen(fd));
  CloseTransientDir(nullptr);  // harmless
}

TEST_CASE("fd guard: a directory stream whose number the program dup2'd over leaves it open") {
  const int fd = OpenTransientFdAt(AT_FDCWD, "/", O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  DIR* d = fdopendir(fd);
  REQUIRE(d != nullptr);
  int p[2];
  REQUIRE(pipe(p) == 0);
  MarkProtectedFdLost(fd);
  REQUIRE(dup2(p[0], fd) == fd);
  CloseTransientDir(d);  // the stream is abandoned, the program's pipe end kept
  CHECK(IsOpen(fd));
  closedir(d);  // the test's own clean-up (closes the pipe end at fd)
  close(p[0]);
  close(p[1]);
}

TEST_CASE("fd guard: a transient number the program dup2'd over stays the program's") {
  const int fd = OpenTransientFd("/dev/null", O_RDONLY);
  REQUIRE(fd >= 0);
  int p[2];
  REQUIRE(pipe(p) == 0);
  // What the dup2 hook does before letting the program's dup2(p[0], fd) through.
  MarkProtectedFdLost(fd);
  REQUIRE(dup2(p[0], fd) == fd);
  CloseTransientFd(fd);
  CHECK(IsOpen(fd));  // the program's pipe end, still open
  CHECK_FALSE(IsProtectedFd(fd));
  close(fd);
  close(p[0]);
  close(p[1]);
}
