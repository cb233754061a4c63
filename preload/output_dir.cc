// The output directory as a descriptor: see output_dir.h.
#include "preload/output_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "preload/fd_guard.h"
#include "preload/segment_files.h"

namespace flightrec {
namespace {

int g_fd = -1;
std::string g_path;
bool g_pinned = false;

void Release() {
  if (g_fd >= 0 && !FdWasLost(g_fd)) {
    UnprotectFd(g_fd);
    close(g_fd);
  }
  g_fd = -1;
  g_path.clear();
  g_pinned = false;
}

void Adopt(int fd, const std::string& path, bool pinned) {
  Release();
  ProtectFd(fd);  // daemons that close every fd must not close ours
  g_fd = fd;
  g_path = path;
  g_pinned = pinned;
}

int OpenDirNoFollow(int at, const std::string& path) {
  return openat(at, path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

}  // namespace

std::string UidDirName(uid_t uid) { return "uid-" + std::to_string(uid); }

bool CurrentOutputDir(const std::string& configured, bool allow_foreign, OutputDir* out, std::string* error) {
  if (g_pinned) {
    if (g_fd >= 0 && FdWasLost(g_fd)) g_fd = -1;  // the number is the application's now
    if (g_fd < 0) {
      *error = "the application took over the descriptor of output directory " + g_path;
      return false;
    }
    struct stat st;
    if (fstat(g_fd, &st) != 0 || st.st_nlink == 0) {
      *error = "output directory " + g_path + " was removed; this process dropped root and cannot create it again";
      return false;
    }
    *out = OutputDir{g_fd, g_path};
    return true;
  }
  if (!PrepareOutputDirectory(configured, allow_foreign, error)) return false;
  // Checked by path above; the descriptor is what we use, so check it too
  // (the name may have been swapped meanwhile).
  const int fd = OpenDirNoFollow(AT_FDCWD, configured);
  if (fd < 0) {
    *error = "cannot open output directory " + configured + ": " + strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || (st.st_uid != geteuid() && !allow_foreign)) {
    close(fd);
    *error = "output directory " + configured + " changed owner while it was opened";
    return false;
  }
  Adopt(fd, configured, false);
  *out = OutputDir{g_fd, g_path};
  return true;
}

bool PinOutputDirForUid(const std::string& configured, bool allow_foreign, uid_t uid, std::string* error) {
  if (!PrepareOutputDirectory(configured, allow_foreign, error)) return false;
  const int parent = OpenDirNoFollow(AT_FDCWD, configured);
  if (parent < 0) {
    *error = "cannot open output directory " + configured + ": " + strerror(errno);
    return false;
  }
  const std::string name = UidDirName(uid);
  const std::string path = configured + "/" + name;
  if (mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "cannot create " + path + ": " + strerror(errno);
    close(parent);
    return false;
  }
  const int fd = OpenDirNoFollow(parent, name);
  const int open_errno = errno;
  close(parent);
  if (fd < 0) {
    // ELOOP/ENOTDIR: a symlink or a file planted under that name.
    *error = "cannot open " + path + " (not following symlinks): " + strerror(open_errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *error = "cannot stat " + path + ": " + strerror(errno);
    close(fd);
    return false;
  }
  if (st.st_uid != 0 && st.st_uid != uid) {
    *error = path + " is owned by uid " + std::to_string(st.st_uid) + ", neither root nor " +
             std::to_string(uid) + "; refusing it";
    close(fd);
    return false;
  }
  // Owned by the uid that will write there; 0700 whatever it was before.
  if (fchown(fd, uid, static_cast<gid_t>(-1)) != 0 || fchmod(fd, 0700) != 0) {
    *error = "cannot hand " + path + " to uid " + std::to_string(uid) + ": " + strerror(errno);
    close(fd);
    return false;
  }
  Adopt(fd, path, true);
  return true;
}

void UnpinOutputDir() {
  if (g_pinned) Release();
}

bool OutputDirPinned() { return g_pinned; }

}  // namespace flightrec
