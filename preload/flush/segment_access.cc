// Segment access: see segment_access.h.
#include "preload/flush/segment_access.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "preload/fds/fd_guard.h"
#include "preload/flush/output_dir.h"
#include "preload/runtime/config.h"

namespace flightrec {
namespace {

// The directory's path as the kernel names it (every symlink resolved), read
// from the descriptor the checked walk opened; empty if it has no usable one.
std::string ResolvedPath(int dir_fd) {
  char link[64], target[4096];
  // thread-self: this thread's table, which is not the program's once the
  // flush thread has one of its own (own_fd_table.h).
  snprintf(link, sizeof(link), "/proc/thread-self/fd/%d", dir_fd);
  const ssize_t n = readlink(link, target, sizeof(target));
  if (n <= 1 || static_cast<size_t>(n) >= sizeof(target) || target[0] != '/') return "";
  std::string path(target, static_cast<size_t>(n));
  if (path.find(" (deleted)") != std::string::npos) return "";
  return path;
}

class OutputAccess final : public format::SegmentFileAccess {
 public:
  int Open(const std::string& name, int flags, unsigned mode) override {
    int fd = -1, err = 0;
    // Between writes the file is reopened in one system call, by the
    // directory's resolved path, following no symlink anywhere
    // (RESOLVE_NO_SYMLINKS): what the checked walk found, and nothing
    // another user could have swapped since (safe_path.h). Walking the path
    // again would take a low descriptor number per component, each for a
    // moment, which a program that lists /proc/self/fd (CPython's
    // test_subprocess) or expects its next open to get that number sees.
    // Whatever fails here is left to the walk to judge.
    const bool create = (flags & O_CREAT) != 0;
    if (!create && !resolved_.empty() && !OutputDirPinned()) {
      fd = OpenResolved(name, flags);
      if (fd >= 0 || errno == EMFILE || errno == ENFILE) return fd;
    }
    {
      const Config& cfg = GetConfig();
      OutputDir dir;
      std::string error;
      if (!OpenOutputDir(cfg.output, cfg.allow_foreign_dir, false, &dir, &error)) {
        err = errno ? errno : ENOENT;
      } else {
        fd = OpenOwnFdAt(dir.fd(), name.c_str(), flags, static_cast<mode_t>(mode));
        err = errno;
        if (create && fd >= 0) resolved_ = OutputDirPinned() ? "" : ResolvedPath(dir.fd());
      }
    }  // the directory's descriptor closes here: keep open's errno
    if (fd < 0) {
      errno = err;
      return -1;
    }
    return Locked(fd);
  }

 private:
  int OpenResolved(const std::string& name, int flags) {
    const std::string path = resolved_ + "/" + name;
    open_how how{};
    how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    OwnFdChange opening;  // no bulk close between the open and the protection
    const int fd = static_cast<int>(syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof(how)));
    if (fd < 0) return -1;
    return Locked(TakeOwnFd(fd));
  }

  static int Locked(int fd) {
    // Released by the close: held only while this write lasts.
    flock(fd, LOCK_SH | LOCK_NB);
    return fd;
  }

  std::string resolved_;  // the output directory's resolved path, from the last create

 public:
  bool Lost(int fd) override { return FdWasLost(fd); }
  void Close(int fd) override { CloseTransientFd(fd); }  // not if the program dup2'd over it meanwhile
  void Unlink(const std::string& name) override {
    const Config& cfg = GetConfig();
    OutputDir dir;
    std::string error;
    if (OpenOutputDir(cfg.output, cfg.allow_foreign_dir, false, &dir, &error)) unlinkat(dir.fd(), name.c_str(), 0);
  }
};

// Plain storage: the preload's constructor may need it before this file's
// dynamic initializers ran.
alignas(OutputAccess) unsigned char g_storage[sizeof(OutputAccess)];
format::SegmentFileAccess* g_access = nullptr;

}  // namespace

format::SegmentFileAccess* OutputSegmentAccess() {
  if (!g_access) g_access = new (g_storage) OutputAccess();
  return g_access;
}

}  // namespace flightrec
