// Where flightrec's own descriptors live in the host's fd table.
//
//  * Never 0-2. A program started with stdin, stdout or stderr closed
//    (posix_spawn's POSIX_SPAWN_CLOSE, daemons) must find those numbers free,
//    as without us: otherwise its fstat(0) succeeds on one of our files and
//    its writes to fd 1 land in our segment.
//  * In the preload, high: from a floor just under the soft RLIMIT_NOFILE
//    (SetOwnFdFloor, at init), not the lowest free numbers. Programs and
//    scripts pick low numbers themselves (`exec 3>file`, `dup2(sock, 4)`)
//    and expect the first file they open to be 3. A number of ours they
//    dup2 over is lost to us (preload/fd_guard.h), and libunwind, which
//    keeps its pipe's numbers for good, would then write into and read from
//    the program's file.
//
// Shared by the segment writer (its file) and the preload's fd guard (every
// other fd it keeps). Outside the preload (flightrec-dump's library) the
// floor stays 3.
#pragma once

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace flightrec::format {

// The lowest number MoveToOwnFdRange moves a descriptor to.
inline std::atomic<int> g_own_fd_floor{3};
inline void SetOwnFdFloor(int floor) { g_own_fd_floor.store(floor < 3 ? 3 : floor, std::memory_order_relaxed); }

// Moves fd to the lowest free number from the floor and returns the fd to
// use from now on (the same one unless moved). With the range above the floor
// full (or the soft limit lowered under it), a descriptor on 0-2 still moves
// to 3 or above; any other stays where it is. New descriptors are
// close-on-exec. Async-signal-safe (fcntl, close). The close is a raw
// syscall: inside the preload it must not go through the close hook, the fd
// was never the application's.
inline int MoveToOwnFdRange(int fd) {
  const int floor = g_own_fd_floor.load(std::memory_order_relaxed);
  if (fd < 0 || fd >= floor) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, floor);
  if (moved < 0 && fd <= 2) moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return fd;
  syscall(SYS_close, fd);
  return moved;
}

}  // namespace flightrec::format
