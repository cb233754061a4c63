// fd guard: keeps flightrec's own file descriptors (segment files, perf event
// fds, lock files, the sock_diag netlink socket) alive in services that close
// every fd they did not open (daemons, "close all fds before work" loops,
// close_range(3, ~0U, 0), closefrom(3)).
//
// It also keeps them off 0-2 (TakeOwnFd, StdioPlaceholders) and protects the
// fds that libraries we use open for themselves (libdw's files; libunwind's
// pipes where validation_pipe.h cannot fake them), which would otherwise
// read, write or close the application's.
//
// The owner calls TakeOwnFd(fd) (or ProtectFd) right after opening one of its fds and
// UnprotectFd(fd) before closing it (a close from one of flightrec's own
// threads also unprotects and really closes, so forgetting UnprotectFd there
// is harmless). The close hooks (preload/fds/hook_fd.cc) consult IsProtectedFd:
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

#include <dirent.h>
#include <fcntl.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "format/own_fds.h"

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

// The marks above are kept per descriptor table: the program's, and the own
// table of a recorder thread that has one (own_fd_table.h), chosen by the
// calling thread. These two serve own_fd_table.cc when it takes one:
// the numbers protected in the program's table (up to max; -1 if more), and
// a clean slate for the own table's marks.
int ProgramTableProtectedFds(int* out, int max);
void ForgetOwnTableMarks();

// Moves fd into flightrec's range: off 0-2, and high (format/own_fds.h).
using format::MoveToOwnFdRange;
// MoveToOwnFdRange, then ProtectFd: for every long-lived fd flightrec opens.
int TakeOwnFd(int fd);
// Both ends of a pipe or socket pair.
inline void TakeOwnFds(int fds[2]) {
  fds[0] = TakeOwnFd(fds[0]);
  fds[1] = TakeOwnFd(fds[1]);
}

// Sets the floor of flightrec's range from the soft RLIMIT_NOFILE: 64 under
// it, the limit taken as 1024 at most (a number near a limit of a million
// would make the kernel grow the process's fd table to that size, and keep
// our descriptors out of select()'s reach for nothing). With a soft limit
// under 128, the floor stays 3. Once, at init, before flightrec opens any.
void SetOwnFdFloorFromLimit();

// The smallest soft RLIMIT_NOFILE the recorder records under. It holds a
// descriptor for the whole run (the segment; with perf, the sampler's epoll
// set and eventfd too) and more for moments (lock files, symbol files, perf
// events per thread): under a smaller limit they would be
// numbers the program itself needs (`ulimit -n 12; python3 -c 'import
// json'`). Below it the recorder stays off (at start) or opens no new
// segment (a program that lowered its limit later): docs/LIMITS.md.
constexpr unsigned long kMinNofileForRecording = 64;
// False, with the soft limit in *soft, when it is below kMinNofileForRecording.
bool NofileLeavesRoomForRecorder(unsigned long* soft);

// While alive, fds 0-2 that were closed hold /dev/null, so that whatever is
// opened meanwhile (at init) lands above them; they are
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

// Files the recorder opens only to read and close again (/proc files, ELF
// headers, perf maps): such a file takes the lowest free number, and is
// protected while it is open. Otherwise a program's close-every-fd
// (close_range, closefrom, a close loop) running during the read would close
// it, hand its number to the program's next socket, and the read and the
// close that follow would hit the program's socket. The window left is the
// few instructions between open's return and the protection, which a
// close_range/closefrom waits out (format/own_fds.h); a single close() of a
// number the program never opened does not.
// OpenTransientFd keeps open's errno on failure. CloseTransientFd closes,
// unless the program dup2'd over the number meanwhile: the number is then its
// file, and stays open. Any thread; no allocation.
int OpenTransientFdAt(int dir_fd, const char* path, int flags, mode_t mode = 0);
// Unprotects and closes one of our descriptors, with no bulk close between
// the two (format/own_fds.h). The caller has checked FdWasLost if it must.
void CloseOwnFd(int fd);
inline int OpenTransientFd(const char* path, int flags) { return OpenTransientFdAt(AT_FDCWD, path, flags); }
// A file the recorder keeps open a while (a segment lock held through its
// upload, the output directory): opened like OpenTransientFdAt, then moved
// high (TakeOwnFd), out of the numbers programs dup2 onto. Closed with
// CloseTransientFd.
int OpenOwnFdAt(int dir_fd, const char* path, int flags, mode_t mode = 0);
void CloseTransientFd(int fd);
// closedir for a stream made with fdopendir on an OpenTransientFdAt
// descriptor (closedir closes inside libc, past the close hook). If the
// program dup2'd over the number meanwhile, the stream is left unfreed
// rather than close the program's file.
void CloseTransientDir(DIR* dir);

using format::BulkCloseScope;
using format::OwnFdChange;

// Descriptors a library opens behind our back. libunwind opens a pipe per
// library at its first use and, while unwinding, writes the byte at an
// address it doubts into it. The pipe hook answers with no descriptor at all
// (validation_pipe.h); this snapshot is the fallback for when the hook is
// not reached (an interposer ahead of us that makes the system call itself):
// the initialisation snapshots the open fds, lets the library initialise,
// then protects every pipe that appeared, so that at least the program's
// close-everything cannot hand libunwind the program's own files.
// Single-threaded contexts only (init); no allocation.
// A new descriptor takes the lowest free number, so whatever a library opens
// lands in the lowest free ones: the snapshot scans up to the 16th free
// number (a dozen system calls at start, not 500) and the check looks there.
struct OpenFdSnapshot {
  static constexpr int kScanFds = 256;  // never beyond this
  static constexpr int kFreeWatched = 16;
  uint64_t open[kScanFds / 64] = {};
  int scanned = 0;  // numbers [0, scanned) were looked at
};
OpenFdSnapshot SnapshotOpenFds();
// Protects the pipes opened since `before` was taken; returns how many.
int ProtectPipesOpenedSince(const OpenFdSnapshot& before);

}  // namespace flightrec
