// Released descriptors (preload/fds/released_fds.h): the list the symbolizer
// keeps of numbers libdw still believes it owns. The close hook itself is
// covered end to end by tests/integration/test_sampler_programs.py
// (fd_released_dlclose); here, the list's own rules.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include "preload/fds/fd_guard.h"
#include "preload/fds/released_fds.h"

using namespace flightrec;

TEST_CASE("released fds: listed numbers are swallowed once, and only inside a scope") {
  ForgetReleasedFds();
  CHECK(ListReleasedFd(40));
  CHECK(ListReleasedFd(41));
  CHECK(ListReleasedFd(40));  // already listed: still one entry
  CHECK(ReleasedFdCount() == 2);
  CHECK_FALSE(t_in_released_fd_scope);
  {
    ReleasedFdScope scope;
    CHECK(t_in_released_fd_scope);
    CHECK(SwallowReleasedClose(40));
    CHECK_FALSE(SwallowReleasedClose(40));  // one close per release
    CHECK_FALSE(SwallowReleasedClose(42));
  }
  CHECK_FALSE(t_in_released_fd_scope);
  CHECK(ReleasedFdCount() == 1);
  CHECK(ListReleasedFd(43));  // reuses the freed slot
  CHECK(ReleasedFdCount() == 2);
  ForgetReleasedFds();
  CHECK(ReleasedFdCount() == 0);
  CHECK_FALSE(SwallowReleasedClose(41));
}

TEST_CASE("released fds: a new descriptor never keeps a listed number") {
  ForgetReleasedFds();
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(AvoidReleasedNumber(fd) == fd);  // not listed: untouched
  REQUIRE(ProtectFd(fd));
  CHECK(ListReleasedFd(fd));
  CHECK(ListReleasedFd(fd + 1));  // the next number is listed too
  const int moved = AvoidReleasedNumber(fd);
  CHECK(moved > fd + 1);
  CHECK(fcntl(fd, F_GETFD) == -1);     // the listed number was given up
  CHECK(fcntl(moved, F_GETFD) != -1);  // the file lives on elsewhere
  CHECK(IsProtectedFd(moved));         // and stays ours
  CHECK_FALSE(IsProtectedFd(fd));
  UnprotectFd(moved);
  close(moved);
  ForgetReleasedFds();
}
