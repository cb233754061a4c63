// fd guard: keeps flightrec's own file descriptors (segment files, perf event
// fds, lock files, the sock_diag netlink socket) alive in services that close
// every fd they did not open (daemons, "close all fds before work" loops,
// close_range(3, ~0U, 0), closefrom(3)).
//
// It also keeps them off 0-2 (TakeOwnFd, StdioPlaceholders) and protects the
// fds that libraries we use open for themselves (libunwind's pipes, libdw's
// files), which would otherwise read, write or close the application's.
//
// The owner calls TakeOwnFd(fd) (or ProtectFd) right after opening one of its fds and
// UnprotectFd(fd) before closing it (a close from one of flightrec's own
// threads also unprotects and really closes, so forgetting UnprotectFd there
// is harmless). The close hooks (preload/hook_fd.cc) consult IsProtectedFd:
//
//  * close(fd) of a protected fd by the application returns 0 without closing
//    it. Returning 0 is the least surprising answer: the application asked
//    for the fd to be gone from *its* point of view, and it never uses it
//    again; EBADF would make it believe its own bookkeeping is wrong.
//  * close_range()/closefrom() close everything else in the range (the range
//    is split around protected fds).
//  * dup2/dup3(x, fd) onto a protected fd: the application wins. Its call
//    goes through unchanged (its behaviour must not change), and our fd is
//    marked lost *before* the call, so the owner sees FdWasLost(fd) and
//    reopens instead of writing into what is now the application's file. The
//    owner must check IsProtectedFd(fd) (or FdWasLost) before each use; the
//    window between that check and its write is the one unavoidable race, so
//    owners should keep their fds out of the low range the application
//    typically dup2s onto (0-2).
//
// Invariants: a lock-free bitmap of atomic words (async-signal-safe, no
// allocation); fds >= kMaxProtectedFd cannot be protected (ProtectFd returns
// false). Bits are only ever changed with atomic RMW operations.
#pragma once

#include <cstdint>

#include "format/stdio_fds.h"

namespace flightrec {

inline constexpr int kMaxProtectedFd = 1 << 20;

// Returns false if fd is out of range (it then stays unprotected).
bool ProtectFd(int fd);
void UnprotectFd(int fd);
bool IsProtectedFd(int fd);

// True once after the application dup2'd onto our protected fd (the fd is no
// longer ours and no longer protected); clears the mark.
bool FdWasLost(int fd);

// Fast check for the close loops: false means no fd is protected at all.
bool AnyProtectedFd();
// Upper bound (exclusive) of protected fds, for range scans.
int ProtectedFdHighWater();

// Called by the dup2/dup3 hooks when the app replaces a protected fd.
void MarkProtectedFdLost(int fd);

// Keeps fd off 0-2 (format/stdio_fds.h).
using format::MoveAboveStdio;
// MoveAboveStdio, then ProtectFd: for every long-lived fd flightrec opens.
int TakeOwnFd(int fd);

// While alive, fds 0-2 that were closed hold /dev/null, so that whatever is
// opened meanwhile (libunwind's pipes, at init) lands above them; they are
// closed again at the end of the scope. Single-threaded contexts only (the
// constructor), where no application thread can be using those numbers.
class StdioPlaceholders {
 public:
  StdioPlaceholders();
  ~StdioPlaceholders();
  StdioPlaceholders(const StdioPlaceholders&) = delete;
  StdioPlaceholders& operator=(const StdioPlaceholders&) = delete;

 private:
  bool held_[3] = {};
};

// Descriptors a library opens behind our back. libunwind opens a pipe per
// unwinder flavour when first used and, while unwinding, writes the byte at
// an address it doubts into the pipe and reads it back (the kernel answers
// EFAULT instead of faulting). If the application closed that pipe and
// reused its numbers, libunwind would read from and write into the
// application's own files and sockets. The initialisation snapshots the open
// fds, lets the library initialise, then protects every pipe that appeared.
// Single-threaded contexts only (init); no allocation.
struct OpenFdSnapshot {
  static constexpr int kScanFds = 256;  // the library's fds are the lowest free ones
  uint64_t open[kScanFds / 64] = {};
};
OpenFdSnapshot SnapshotOpenFds();
// Protects the pipes opened since `before` was taken; returns how many.
int ProtectPipesOpenedSince(const OpenFdSnapshot& before);

}  // namespace flightrec
