// The output directory as a descriptor: see output_dir.h.
#include "preload/flush/output_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "preload/fds/fd_guard.h"
#include "preload/flush/safe_path.h"

namespace flightrec {
namespace {

// The pinned directory. Plain data only: the preload's constructor may run
// before this file's dynamic initializers.
int g_pinned_fd = -1;
std::string* g_pinned_path = nullptr;

// One of our descriptors (fd_guard.h): high and protected from the program's
// close-every-descriptor, which would otherwise hand its number to a file of
// the program's, into which we would then create segments.
int OpenDirNoFollow(int at, const std::string& path) {
  return OpenOwnFdAt(at, path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
}

}  // namespace

OutputDir::~OutputDir() {
  if (owned_) CloseTransientFd(fd_);
}

std::string UidDirName(uid_t uid) { return "uid-" + std::to_string(uid); }

bool OpenOutputDir(const std::string& configured, bool allow_foreign, bool prepare, OutputDir* out,
                   std::string* error) {
  if (g_pinned_path) {
    if (g_pinned_fd >= 0 && FdWasLost(g_pinned_fd)) g_pinned_fd = -1;  // the number is the application's now
    if (g_pinned_fd < 0) {
      *error = "the application took over the descriptor of output directory " + *g_pinned_path;
      errno = EBADF;
      return false;
    }
    struct stat st;
    if (fstat(g_pinned_fd, &st) != 0 || st.st_nlink == 0) {
      *error =
          "output directory " + *g_pinned_path + " was removed; this process dropped root and cannot create it again";
      errno = ENOENT;
      return false;
    }
    out->fd_ = g_pinned_fd;
    out->owned_ = false;
    out->path_ = *g_pinned_path;
    return true;
  }
  // Walked from "/" without following other users' symlinks, and checked on
  // the descriptor each step opened (safe_path.h): the name cannot be
  // swapped between the check and the use.
  const int fd = OpenDirectoryPathSafely(configured, prepare, allow_foreign, error);
  if (fd < 0) return false;
  if (prepare && faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) != 0) {
    const int err = errno;
    *error = "output directory " + configured + " is not writable: " + strerror(err);
    CloseTransientFd(fd);
    errno = err;
    return false;
  }
  out->fd_ = fd;
  out->owned_ = true;
  out->path_ = configured;
  return true;
}

bool PinOutputDirForUid(const std::string& configured, bool allow_foreign, uid_t uid, std::string* error) {
  OutputDir parent;
  if (!OpenOutputDir(configured, allow_foreign, true, &parent, error)) return false;
  const std::string name = UidDirName(uid);
  const std::string path = parent.path() + "/" + name;
  if (mkdirat(parent.fd(), name.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "cannot create " + path + ": " + strerror(errno);
    return false;
  }
  const int fd = OpenDirNoFollow(parent.fd(), name);
  if (fd < 0) {
    // ELOOP/ENOTDIR: a symlink or a file planted under that name.
    *error = "cannot open " + path + " (not following symlinks): " + strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *error = "cannot stat " + path + ": " + strerror(errno);
    CloseTransientFd(fd);
    return false;
  }
  if (st.st_uid != 0 && st.st_uid != uid) {
    *error = path + " is owned by uid " + std::to_string(st.st_uid) + ", neither root nor " + std::to_string(uid) +
             "; refusing it";
    CloseTransientFd(fd);
    return false;
  }
  // Owned by the uid that will write there; 0700 whatever it was before.
  if (fchown(fd, uid, static_cast<gid_t>(-1)) != 0 || fchmod(fd, 0700) != 0) {
    *error = "cannot hand " + path + " to uid " + std::to_string(uid) + ": " + strerror(errno);
    CloseTransientFd(fd);
    return false;
  }
  UnpinOutputDir();
  g_pinned_fd = fd;
  g_pinned_path = new std::string(path);
  return true;
}

void UnpinOutputDir() {
  if (!g_pinned_path) return;
  CloseTransientFd(g_pinned_fd);
  g_pinned_fd = -1;
  delete g_pinned_path;
  g_pinned_path = nullptr;
}

bool OutputDirPinned() { return g_pinned_path != nullptr; }

int ReopenPinnedOutputDir(std::string* path) {
  if (!g_pinned_path) return -1;
  if (g_pinned_fd >= 0 && FdWasLost(g_pinned_fd)) g_pinned_fd = -1;  // as OpenOutputDir does
  if (g_pinned_fd < 0) return -1;
  // "." through the pinned descriptor: the path itself is out of reach.
  const int fd = OpenDirNoFollow(g_pinned_fd, ".");
  if (fd >= 0) *path = *g_pinned_path;
  return fd;
}

}  // namespace flightrec
