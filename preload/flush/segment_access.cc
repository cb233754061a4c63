// Segment access: see segment_access.h.
#include "preload/flush/segment_access.h"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <new>

#include "preload/fds/fd_guard.h"
#include "preload/flush/output_dir.h"
#include "preload/runtime/config.h"

namespace flightrec {
namespace {

class OutputAccess final : public format::SegmentFileAccess {
 public:
  int Open(const std::string& name, int flags, unsigned mode) override {
    int fd = -1, err = 0;
    {
      const Config& cfg = GetConfig();
      OutputDir dir;
      std::string error;
      if (!OpenOutputDir(cfg.output, cfg.allow_foreign_dir, false, &dir, &error)) {
        err = errno ? errno : ENOENT;
      } else {
        fd = OpenOwnFdAt(dir.fd(), name.c_str(), flags, static_cast<mode_t>(mode));
        err = errno;
      }
    }  // the directory's descriptor closes here: keep open's errno
    if (fd < 0) {
      errno = err;
      return -1;
    }
    // Released by the close: held only while this write lasts.
    flock(fd, LOCK_SH | LOCK_NB);
    return fd;
  }
  bool Lost(int fd) override { return FdWasLost(fd); }
  void Close(int fd) override { CloseTransientFd(fd); }  // not if the program dup2'd over it meanwhile
  void Unlink(const std::string& name) override {
    const Config& cfg = GetConfig();
    OutputDir dir;
    std::string error;
    if (OpenOutputDir(cfg.output, cfg.allow_foreign_dir, false, &dir, &error))
      unlinkat(dir.fd(), name.c_str(), 0);
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
