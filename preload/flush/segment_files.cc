// Segment files: see segment_files.h.
#include "preload/flush/segment_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "preload/fds/fd_guard.h"
#include "preload/flush/safe_path.h"
#include "preload/flush/writer_liveness.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/utc_stamp.h"

namespace flightrec {
namespace {

bool HasSuffix(const std::string& s, const char* suffix) {
  const size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The pid in "<stamp>-<service>-<pid>-<seq>.active" (the service never
// holds '-'); 0 if the name does not parse.
pid_t ActiveSegmentPid(const std::string& name) {
  const size_t seq_dash = name.rfind('-');
  if (seq_dash == std::string::npos || seq_dash == 0) return 0;
  const size_t pid_dash = name.rfind('-', seq_dash - 1);
  if (pid_dash == std::string::npos || seq_dash - pid_dash < 2 || seq_dash - pid_dash > 11) return 0;
  uint64_t pid = 0;
  for (size_t i = pid_dash + 1; i < seq_dash; ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    pid = pid * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return pid > 0 && pid <= 0x7fffffff ? static_cast<pid_t>(pid) : 0;
}

// A .active segment whose process is gone (killed before it could seal):
// nothing will ever seal it, so it must not hold the budget forever. Who is
// gone is writer_liveness.h's call, from the identity in the file's header.
bool Abandoned(int fd, const std::string& name) {
  return ActiveFileWriterGone(fd, ActiveSegmentPid(name), RealtimeNs());
}

}  // namespace

bool PrepareOutputDirectory(const std::string& dir, bool allow_foreign, std::string* error) {
  // Created and checked component by component (safe_path.h).
  const int fd = OpenDirectoryPathSafely(dir, /*create=*/true, allow_foreign, error);
  if (fd < 0) return false;
  const bool writable = faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) == 0;
  if (!writable) *error = "output directory " + dir + " is not writable: " + strerror(errno);
  CloseTransientFd(fd);
  return writable;
}

std::string ActiveSegmentPath(const std::string& dir, const std::string& service, uint32_t pid,
                              uint64_t seq, uint64_t realtime_ns) {
  std::string safe;
  for (char c : service) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_';
    safe.push_back(ok ? c : '_');  // '-' separates fields, so it is replaced too
    if (safe.size() >= 64) break;
  }
  if (safe.empty()) safe = "unknown";
  const std::string stamp = UtcStamp(realtime_ns);
  char tail[64];
  snprintf(tail, sizeof(tail), "-%u-%04llu.active", pid, static_cast<unsigned long long>(seq));
  return dir + "/" + stamp + "-" + safe + tail;
}

std::string SealedSegmentPath(const std::string& active_path) {
  if (HasSuffix(active_path, ".active")) return active_path.substr(0, active_path.size() - 7) + ".seg";
  return active_path + ".seg";
}

uint64_t EnforceDiskBudget(const std::string& dir, uint64_t max_bytes, const std::string& current) {
  const int fd = OpenTransientFd(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return 0;
  const size_t slash = current.rfind('/');
  const bool inside = slash != std::string::npos && current.compare(0, slash, dir) == 0;
  const uint64_t deleted = EnforceDiskBudgetAt(fd, max_bytes, inside ? current.substr(slash + 1) : "");
  CloseTransientFd(fd);
  return deleted;
}

uint64_t EnforceDiskBudgetAt(int dir_fd, uint64_t max_bytes, const std::string& current_name,
                             uint64_t* total_after) {
  // A directory stream of its own: closedir() must not close dir_fd.
  const int own = OpenTransientFdAt(dir_fd, ".", O_RDONLY | O_DIRECTORY);
  if (own < 0) return 0;
  DIR* d = fdopendir(own);
  if (!d) {
    CloseTransientFd(own);
    return 0;
  }
  struct Entry {
    std::string name;
    uint64_t size;
    bool sealed;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const bool sealed = HasSuffix(name, ".seg");
    if (!sealed && !HasSuffix(name, ".active")) continue;
    struct stat st;
    // A second name makes it no segment of ours (a hardlink planted in a
    // sticky directory): neither counted nor deleted.
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)
      continue;
    total += static_cast<uint64_t>(st.st_size);
    entries.push_back({name, static_cast<uint64_t>(st.st_size), sealed});
  }
  // Names start with a UTC timestamp, so name order is age order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  uint64_t deleted = 0;
  for (const Entry& e : entries) {
    if (total <= max_bytes) break;
    if (e.name == current_name) continue;
    // The uploader holds an flock on a segment it is shipping, a writer one
    // on its .active file while it writes: skip those.
    const int fd = OpenTransientFdAt(dirfd(d), e.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);  // a planted FIFO never blocks
    if (fd < 0) continue;
    if ((e.sealed || Abandoned(fd, e.name)) && flock(fd, LOCK_EX | LOCK_NB) == 0) {
      if (unlinkat(dirfd(d), e.name.c_str(), 0) == 0) {
        total -= e.size;
        ++deleted;
      }
    }
    CloseTransientFd(fd);
  }
  {
    OwnFdChange change;
    UnprotectFd(own);  // closedir closes it without the close hook
    closedir(d);
  }
  if (total_after) *total_after = total;
  return deleted;
}

}  // namespace flightrec
