// fd guard: the protected-fd and lost-fd bitmaps, and keeping our fds off
// 0-2 and libraries' fds protected (see fd_guard.h).
#include "preload/fds/fd_guard.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace flightrec {
namespace {

constexpr int kWords = kMaxProtectedFd / 64;
// One set per descriptor table: the program's (shared by every thread but a
// recorder thread with a table of its own) and that own table's
// (own_fd_table.h). A number means a different file in each, so protecting
// it in the wrong set would make the program's close skip its own file.
// Zero-initialised bss: untouched pages cost nothing.
struct Marks {
  std::atomic<uint64_t> protected_bits[kWords];
  std::atomic<uint64_t> lost[kWords];
  std::atomic<int> count{0};       // protected fds right now
  std::atomic<int> high_water{0};  // highest protected fd ever + 1
};
Marks g_program_table;
Marks g_own_table;

Marks& Table() { return format::t_own_fd_table ? g_own_table : g_program_table; }

bool InRange(int fd) { return fd >= 0 && fd < kMaxProtectedFd; }
uint64_t Bit(int fd) { return uint64_t{1} << (fd & 63); }

}  // namespace

bool ProtectFd(int fd) {
  if (!InRange(fd)) return false;
  Marks& t = Table();
  t.lost[fd >> 6].fetch_and(~Bit(fd), std::memory_order_relaxed);
  const uint64_t old = t.protected_bits[fd >> 6].fetch_or(Bit(fd), std::memory_order_release);
  if (!(old & Bit(fd))) t.count.fetch_add(1, std::memory_order_relaxed);
  int hw = t.high_water.load(std::memory_order_relaxed);
  while (fd + 1 > hw && !t.high_water.compare_exchange_weak(hw, fd + 1, std::memory_order_relaxed)) {}
  return true;
}

void UnprotectFd(int fd) {
  if (!InRange(fd)) return;
  Marks& t = Table();
  const uint64_t old = t.protected_bits[fd >> 6].fetch_and(~Bit(fd), std::memory_order_release);
  if (old & Bit(fd)) t.count.fetch_sub(1, std::memory_order_relaxed);
}

bool IsProtectedFd(int fd) {
  if (!InRange(fd)) return false;
  return (Table().protected_bits[fd >> 6].load(std::memory_order_acquire) & Bit(fd)) != 0;
}

void MarkProtectedFdLost(int fd) {
  if (!InRange(fd)) return;
  // Lost first, then unprotected: an owner that sees "not protected" also
  // sees why.
  Table().lost[fd >> 6].fetch_or(Bit(fd), std::memory_order_release);
  UnprotectFd(fd);
}

bool FdWasLost(int fd) {
  if (!InRange(fd)) return false;
  return (Table().lost[fd >> 6].fetch_and(~Bit(fd), std::memory_order_acq_rel) & Bit(fd)) != 0;
}

int ProgramTableProtectedFds(int* out, int max) {
  int n = 0;
  const int hw = g_program_table.high_water.load(std::memory_order_relaxed);
  for (int fd = 0; fd < hw && fd < kMaxProtectedFd; fd++) {
    if (!(g_program_table.protected_bits[fd >> 6].load(std::memory_order_acquire) & Bit(fd))) continue;
    if (n == max) return -1;
    out[n++] = fd;
  }
  return n;
}

void ForgetOwnTableMarks() {
  const int hw = g_own_table.high_water.load(std::memory_order_relaxed);
  for (int w = 0; w < kWords && w * 64 < hw; w++) {
    g_own_table.protected_bits[w].store(0, std::memory_order_relaxed);
    g_own_table.lost[w].store(0, std::memory_order_relaxed);
  }
  g_own_table.count.store(0, std::memory_order_relaxed);
  g_own_table.high_water.store(0, std::memory_order_release);
}

int OpenTransientFdAt(int dir_fd, const char* path, int flags, mode_t mode) {
  OwnFdChange opening;  // no bulk close between the open and the protection
  const int fd = openat(dir_fd, path, flags | O_CLOEXEC, mode);
  if (fd >= 0) ProtectFd(fd);
  return fd;
}

int OpenOwnFdAt(int dir_fd, const char* path, int flags, mode_t mode) {
  OwnFdChange opening;  // no bulk close between the open and the protection
  const int fd = openat(dir_fd, path, flags | O_CLOEXEC, mode);
  return fd >= 0 ? TakeOwnFd(fd) : fd;
}

void CloseOwnFd(int fd) {
  if (fd < 0) return;
  OwnFdChange change;
  // Unprotected first: on an application thread the close hook swallows a
  // protected number's close.
  UnprotectFd(fd);
  close(fd);
}

void CloseTransientFd(int fd) {
  if (fd >= 0 && !FdWasLost(fd)) CloseOwnFd(fd);
}

void CloseTransientDir(DIR* dir) {
  if (!dir) return;
  const int fd = dirfd(dir);
  if (FdWasLost(fd)) return;  // a few KiB leaked, once, beats closing the program's file
  OwnFdChange change;
  UnprotectFd(fd);
  closedir(dir);
}

OpenFdSnapshot SnapshotOpenFds() {
  OpenFdSnapshot s;
  int free_seen = 0;
  for (int fd = 0; fd < OpenFdSnapshot::kScanFds && free_seen < OpenFdSnapshot::kFreeWatched; fd++) {
    if (fcntl(fd, F_GETFD) != -1) {
      s.open[fd >> 6] |= Bit(fd);
    } else {
      free_seen++;
    }
    s.scanned = fd + 1;
  }
  return s;
}

int ProtectPipesOpenedSince(const OpenFdSnapshot& before) {
  int n = 0;
  for (int fd = 0; fd < before.scanned; fd++) {
    if (before.open[fd >> 6] & Bit(fd)) continue;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && ProtectFd(fd)) n++;
  }
  return n;
}

int TakeOwnFd(int fd) {
  fd = MoveToOwnFdRange(fd);
  ProtectFd(fd);
  return fd;
}

void SetOwnFdFloorFromLimit() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t limit = rl.rlim_cur < 1024 ? rl.rlim_cur : 1024;
  if (limit < 128) return;
  format::SetOwnFdFloor(static_cast<int>(limit) - 64);
}

bool NofileLeavesRoomForRecorder(unsigned long* soft) {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return true;
  *soft = static_cast<unsigned long>(rl.rlim_cur);
  return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= kMinNofileForRecording;
}

StdioPlaceholders::StdioPlaceholders() {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) != -1) continue;
    // The lowest free number is fd itself: every lower one is open.
    const int got = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (got == fd) {
      held_[fd] = true;
    } else if (got >= 0) {
      syscall(SYS_close, got);
    }
  }
}

StdioPlaceholders::~StdioPlaceholders() {
  for (int fd = 0; fd <= 2; fd++)
    if (held_[fd]) syscall(SYS_close, fd);
}

bool AnyProtectedFd() { return Table().count.load(std::memory_order_relaxed) > 0; }
int ProtectedFdHighWater() { return Table().high_water.load(std::memory_order_relaxed); }

}  // namespace flightrec
