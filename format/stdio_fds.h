// Keeping a descriptor off 0-2. A program started with stdin, stdout or
// stderr closed (posix_spawn's POSIX_SPAWN_CLOSE, daemons) must find those
// numbers free, as without us: otherwise its fstat(0) succeeds on one of our
// files and its writes to fd 1 land in our segment. Shared by the segment
// writer (its file) and the preload's fd guard (every other fd it keeps).
#pragma once

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace flightrec::format {

// Moves fd to the lowest free number from 3 and returns the fd to use from
// now on (the same one unless moved, or if moving failed). Async-signal-safe
// (fcntl, close). The close is a raw syscall: inside the preload it must not
// go through the close hook, the fd was never the application's.
inline int MoveAboveStdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return fd;
  syscall(SYS_close, fd);
  return moved;
}

}  // namespace flightrec::format
