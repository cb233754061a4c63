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
//    dup2 over is lost to us (preload/fds/fd_guard.h), and libunwind, which
//    keeps its pipe's numbers for good, would then write into and read from
//    the program's file.
//
// Shared by the segment writer (its file) and the preload's fd guard (every
// other fd it keeps). Outside the preload (flightrec-dump's library) the
// floor stays 3.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace flightrec::format {

// The lowest number MoveToOwnFdRange moves a descriptor to.
inline std::atomic<int> g_own_fd_floor{3};
inline void SetOwnFdFloor(int floor) { g_own_fd_floor.store(floor < 3 ? 3 : floor, std::memory_order_relaxed); }

// Closes the low number a descriptor of ours just left. A raw syscall: inside
// the preload it must not go through the close hook, the number was never
// the application's. Under ThreadSanitizer it goes through libc's close
// instead, so TSan's interceptor sees it: TSan models an fd number as a
// memory location, and a close it does not see leaves our last use of the
// number (an fstat) standing, to be paired with the program's next close of
// that number as a race. There the call reaches the close hook, which for a
// number no one protects and no socket holds is a plain close.
inline void CloseVacatedFd(int fd) {
#if defined(__SANITIZE_THREAD__)
  close(fd);
#else
  syscall(SYS_close, fd);
#endif
}

// Moves fd to the lowest free number from the floor and returns the fd to
// use from now on (the same one unless moved). With the range above the floor
// full (or the soft limit lowered under it), a descriptor on 0-2 still moves
// to 3 or above; any other stays where it is. New descriptors are
// close-on-exec. Async-signal-safe (fcntl, close).
inline int MoveToOwnFdRange(int fd) {
  const int floor = g_own_fd_floor.load(std::memory_order_relaxed);
  if (fd < 0 || fd >= floor) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, floor);
  if (moved < 0 && fd <= 2) moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return fd;
  CloseVacatedFd(fd);
  return moved;
}

// A program's bulk close (close_range, closefrom: a daemon's start, a
// helper before exec) and the recorder's changes to its own descriptors
// exclude each other. A new descriptor takes the lowest free number and only
// becomes ours to keep (protected, preload/fds/fd_guard.h) a few instructions
// after the open; a descriptor we close is unprotected a few instructions
// before the close. A bulk close in either gap would close it and hand its
// number to the program's next file, which the recorder would then read,
// write into or close.
//
// OwnFdChange brackets such a change of ours: open up to protection, or
// unprotection up to close. It waits while a bulk close runs, then counts
// itself in. BulkCloseScope brackets the program's call (the close hooks):
// it announces itself, then waits for the changes in flight, a bounded while
// (the host comes first). Each side announces with a seq_cst
// read-modify-write and then reads the other's counter, so they cannot both
// pass. A change made on a thread that is itself inside a bulk close (a
// signal handler's) does not wait for it. A fork child starts with both
// counters at zero (ResetFdOpeningAfterFork).
inline std::atomic<uint32_t> g_bulk_closes{0};
// True on a recorder thread whose descriptor table is its own, not the
// program's (preload/fds/own_fd_table.h): the program's bulk closes cannot
// reach its descriptors, so its changes need not wait for them.
inline __thread bool t_own_fd_table __attribute__((tls_model("initial-exec"))) = false;
inline std::atomic<uint32_t> g_own_opens{0};
// Scopes nest (a socket() made inside one goes through the hook's): only the
// outermost counts.
inline __thread int t_own_fd_change_depth __attribute__((tls_model("initial-exec"))) = 0;
inline __thread bool t_in_bulk_close __attribute__((tls_model("initial-exec"))) = false;

class OwnFdChange {
 public:
  OwnFdChange() : skipped_(t_own_fd_table) {
    if (skipped_) return;
    if (t_own_fd_change_depth++ > 0) return;
    for (int spins = 0;; spins++) {
      while (!t_in_bulk_close && g_bulk_closes.load(std::memory_order_seq_cst) != 0 && spins++ < kMaxSpins)
        sched_yield();
      g_own_opens.fetch_add(1, std::memory_order_seq_cst);
      if (t_in_bulk_close || g_bulk_closes.load(std::memory_order_seq_cst) == 0 || spins >= kMaxSpins) return;
      g_own_opens.fetch_sub(1, std::memory_order_seq_cst);  // the program goes first
    }
  }
  ~OwnFdChange() {
    if (skipped_) return;
    if (--t_own_fd_change_depth == 0) g_own_opens.fetch_sub(1, std::memory_order_release);
  }
  OwnFdChange(const OwnFdChange&) = delete;
  OwnFdChange& operator=(const OwnFdChange&) = delete;

 private:
  // Bulk closes are single system calls; this bound is only for a counter
  // left raised by a thread that died inside one.
  static constexpr int kMaxSpins = 100000;
  const bool skipped_;
};

class BulkCloseScope {
 public:
  BulkCloseScope() {
    t_in_bulk_close = true;
    g_bulk_closes.fetch_add(1, std::memory_order_seq_cst);
    // Our changes in flight are a system call or three each.
    for (int i = 0; i < 20000 && g_own_opens.load(std::memory_order_seq_cst) != 0; i++) sched_yield();
  }
  ~BulkCloseScope() {
    g_bulk_closes.fetch_sub(1, std::memory_order_release);
    t_in_bulk_close = false;
  }
  BulkCloseScope(const BulkCloseScope&) = delete;
  BulkCloseScope& operator=(const BulkCloseScope&) = delete;
};

inline void ResetFdOpeningAfterFork() {
  g_bulk_closes.store(0, std::memory_order_relaxed);
  g_own_opens.store(0, std::memory_order_relaxed);
  t_own_fd_change_depth = 0;
  t_in_bulk_close = false;
}

}  // namespace flightrec::format
