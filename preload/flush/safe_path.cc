// Walking the output path component by component: see safe_path.h.
#include "preload/flush/safe_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>

#include "preload/fds/fd_guard.h"

namespace flightrec {
namespace {

constexpr int kMaxSymlinks = 40;  // as the kernel's own path walk

bool OthersCanWrite(const struct stat& st) {
  return (st.st_mode & S_IWOTH) != 0 || ((st.st_mode & S_IWGRP) != 0 && st.st_gid != getegid());
}

std::string Shown(const std::string& walked) { return walked.empty() ? "/" : walked; }

// A directory on the way to the output directory: only root and we may
// change what its names lead to (sticky: others may add names, not swap ours).
bool CheckOnTheWay(const struct stat& st, const std::string& where, std::string* error) {
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    *error = "output path component " + Shown(where) + " is owned by uid " + std::to_string(st.st_uid) +
             ", neither root nor us; refusing it";
    return false;
  }
  if (OthersCanWrite(st) && (st.st_mode & S_ISVTX) == 0) {
    *error = "output path component " + Shown(where) + " is writable by other users and not sticky; refusing it";
    return false;
  }
  return true;
}

// The output directory itself.
bool CheckFinal(const struct stat& st, const std::string& where, bool allow_foreign, std::string* error) {
  const bool ours = st.st_uid == geteuid();
  if (!ours && !allow_foreign) {
    *error = "output directory " + Shown(where) + " is owned by uid " + std::to_string(st.st_uid) +
             ", not us; set FLIGHTREC_ALLOW_FOREIGN_DIR=1 to use it";
    return false;
  }
  if (OthersCanWrite(st) && !(ours && (st.st_mode & S_ISVTX) != 0)) {
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    *error = "output directory " + Shown(where) + " (mode " + mode + ", uid " + std::to_string(st.st_uid) +
             ") is writable by other users; refusing it (only a sticky directory of our own may be)";
    return false;
  }
  return true;
}

std::deque<std::string> Components(const std::string& path) {
  std::deque<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) parts.emplace_back(path, start, end - start);
    start = end + 1;
  }
  return parts;
}

// "/" itself, checked like any directory on the way.
int OpenRoot(std::string* error) {
  const int fd = OpenTransientFd("/", O_RDONLY | O_DIRECTORY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    *error = std::string("cannot open /: ") + strerror(errno);
    CloseTransientFd(fd);
    return -1;
  }
  if (!CheckOnTheWay(st, "", error)) {
    CloseTransientFd(fd);
    errno = EPERM;
    return -1;
  }
  return fd;
}

}  // namespace

int OpenDirectoryPathSafely(const std::string& path, bool create, bool allow_foreign, std::string* error) {
  if (path.empty() || path[0] != '/') {
    *error = "output directory '" + path + "' is not an absolute path";
    errno = EINVAL;
    return -1;
  }
  std::deque<std::string> todo = Components(path);
  int cur = OpenRoot(error);
  if (cur < 0) return -1;
  std::string walked;  // where cur is, for messages
  int links = 0;
  auto fail = [&](int err) {
    CloseTransientFd(cur);
    errno = err;
    return -1;
  };
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == ".") continue;
    const bool last = todo.empty();
    const std::string where = name == ".." ? walked.substr(0, walked.rfind('/')) : walked + "/" + name;
    struct stat st;
    if (name != "..") {
      int rc = fstatat(cur, name.c_str(), &st, AT_SYMLINK_NOFOLLOW);
      if (rc != 0 && errno == ENOENT && create) {
        if (mkdirat(cur, name.c_str(), 0700) != 0 && errno != EEXIST) {
          *error = "cannot create " + where + ": " + strerror(errno);
          return fail(errno);
        }
        rc = fstatat(cur, name.c_str(), &st, AT_SYMLINK_NOFOLLOW);
      }
      if (rc != 0) {
        const int err = errno;
        *error = "cannot stat " + where + ": " + strerror(err);
        return fail(err);
      }
      if (S_ISLNK(st.st_mode)) {
        if (last) {
          *error = "output directory " + where + " is a symlink; refusing to follow it";
          return fail(ELOOP);
        }
        // The directory holding it passed the checks, so only its owner (or
        // root) can have put it there or can swap it.
        if (st.st_uid != 0 && st.st_uid != geteuid()) {
          *error = "output path component " + where + " is a symlink owned by uid " + std::to_string(st.st_uid) +
                   ", neither root nor us; refusing to follow it";
          return fail(ELOOP);
        }
        if (++links > kMaxSymlinks) {
          *error = "too many symlinks in output path " + path;
          return fail(ELOOP);
        }
        char target[4096];
        const ssize_t n = readlinkat(cur, name.c_str(), target, sizeof(target));
        if (n <= 0 || static_cast<size_t>(n) >= sizeof(target)) {
          *error = "cannot read symlink " + where;
          return fail(n < 0 ? errno : ENAMETOOLONG);
        }
        const std::string link(target, static_cast<size_t>(n));
        std::deque<std::string> more = Components(link);
        todo.insert(todo.begin(), more.begin(), more.end());
        if (link[0] == '/') {
          CloseTransientFd(cur);
          cur = OpenRoot(error);
          if (cur < 0) return -1;
          walked.clear();
        }
        continue;
      }
      if (!S_ISDIR(st.st_mode)) {
        *error = (last ? "output path " : "output path component ") + where + " is not a directory";
        return fail(ENOTDIR);
      }
    }
    const int next = OpenTransientFdAt(cur, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (next < 0) {
      const int err = errno;
      *error = "cannot open " + where + " (not following symlinks): " + strerror(err);
      return fail(err);
    }
    CloseTransientFd(cur);
    cur = next;
    walked = where;
    // Checked on the descriptor: what we opened is what we use.
    if (fstat(cur, &st) != 0) {
      const int err = errno;
      *error = "cannot stat " + Shown(walked) + ": " + strerror(err);
      return fail(err);
    }
    if (!last && !CheckOnTheWay(st, walked, error)) return fail(EPERM);
  }
  struct stat st;
  if (fstat(cur, &st) != 0) {
    *error = "cannot stat " + Shown(walked) + ": " + strerror(errno);
    return fail(errno);
  }
  if (!CheckFinal(st, walked, allow_foreign, error)) return fail(EPERM);
  const int fd = OpenOwnFdAt(cur, ".", O_RDONLY | O_DIRECTORY);
  const int err = errno;
  CloseTransientFd(cur);
  if (fd < 0) *error = "cannot open output directory " + path + ": " + strerror(err);
  errno = err;
  return fd;
}

}  // namespace flightrec
