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

// The pid in "<stamp>-<service>-<pid>-<seq>.active" or "...-<seq>.seg"
// (the service never holds '-'); 0 if the name does not parse (a kept
// incident's "@TAG" makes its sequence field unparsable: never needed).
pid_t SegmentPid(const std::string& file_name) {
  std::string name = file_name;
  if (HasSuffix(name, ".active")) name.resize(name.size() - 7);
  else if (HasSuffix(name, ".seg")) name.resize(name.size() - 4);
  else return 0;
  const size_t seq_dash = name.rfind('-');
  if (seq_dash == std::string::npos || seq_dash == 0) return 0;
  for (size_t i = seq_dash + 1; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return 0;
  const size_t pid_dash = name.rfind('-', seq_dash - 1);
  if (pid_dash == std::string::npos || seq_dash - pid_dash < 2 || seq_dash - pid_dash > 11) return 0;
  uint64_t pid = 0;
  for (size_t i = pid_dash + 1; i < seq_dash; ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    pid = pid * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return pid > 0 && pid <= 0x7fffffff ? static_cast<pid_t>(pid) : 0;
}

bool ProcessGone(pid_t pid) { return pid > 0 && pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH; }

// A .active segment whose process is gone (killed before it could seal):
// nothing will ever seal it, so it must not hold the budget forever. Who is
// gone is writer_liveness.h's call, from the identity in the file's header
// (a pid reused since, or a writer in another pid namespace, stays live).
bool Abandoned(int fd, const std::string& name) { return ActiveFileWriterGone(fd, SegmentPid(name), RealtimeNs()); }

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

std::string ActiveSegmentPath(const std::string& dir, const std::string& service, uint32_t pid, uint64_t seq,
                              uint64_t realtime_ns) {
  std::string safe;
  for (char c : service) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
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

uint64_t AllocatedBytes(const struct stat& st) {
  const uint64_t blocks = static_cast<uint64_t>(st.st_blocks) * 512;
  return blocks == 0 && st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : blocks;
}

uint64_t EnforceDiskBudgetAt(int dir_fd, uint64_t max_bytes, const std::string& current_name, uint64_t* total_after,
                             uint64_t expire_windows_before_ns, BudgetDeletions* deletions) {
  BudgetDeletions unused;
  BudgetDeletions& out = deletions ? *deletions : unused;
  // A directory stream of its own: closedir() must not close dir_fd.
  const int own = OpenTransientFdAt(dir_fd, ".", O_RDONLY | O_DIRECTORY);
  if (own < 0) return 0;
  DIR* d = fdopendir(own);
  if (!d) {
    CloseTransientFd(own);
    return 0;
  }
  enum class Kind { kActive, kSealed, kWindow, kIncident };
  struct Entry {
    std::string name;
    uint64_t size;
    Kind kind;
    uint64_t mtime_ns;
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
    const uint64_t size = AllocatedBytes(st);
    total += size;
    Kind kind = Kind::kActive;
    if (sealed && name.find('@') != std::string::npos) kind = Kind::kIncident;
    // Window mode seals a segment no incident covers read-only (window_keeper.h).
    else if (sealed && (st.st_mode & 0777) == S_IRUSR) kind = Kind::kWindow;
    else if (sealed) kind = Kind::kSealed;
    const uint64_t mtime_ns =
        static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec);
    entries.push_back({name, size, kind, mtime_ns});
  }
  // Names start with a UTC timestamp, so name order is age order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  // Deletes one entry unless someone holds a lock on it (the uploader holds
  // an flock on a segment it is shipping, a writer on its .active while it writes).
  // An .active file goes only if its writer is gone (Abandoned).
  auto remove = [&](const Entry& e) {
    const int fd =
        OpenTransientFdAt(dirfd(d), e.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);  // a planted FIFO never blocks
    if (fd < 0) return false;
    bool gone = false;
    if ((e.kind != Kind::kActive || Abandoned(fd, e.name)) && flock(fd, LOCK_EX | LOCK_NB) == 0)
      gone = unlinkat(dirfd(d), e.name.c_str(), 0) == 0;
    CloseTransientFd(fd);
    if (gone) total -= e.size;
    return gone;
  };
  std::vector<bool> removed(entries.size(), false);
  if (expire_windows_before_ns) {
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      if (e.kind != Kind::kWindow || e.mtime_ns >= expire_windows_before_ns || !ProcessGone(SegmentPid(e.name)))
        continue;
      if ((removed[i] = remove(e))) {
        out.expired_windows++;
        out.expired_bytes += e.size;
      }
    }
  }
  // Kept incidents are what the window was for: they go only when nothing
  // else is left to delete.
  for (const bool incidents : {false, true}) {
    for (size_t i = 0; i < entries.size() && total > max_bytes; ++i) {
      const Entry& e = entries[i];
      if (removed[i] || (e.kind == Kind::kIncident) != incidents) continue;
      if (e.name == current_name) continue;
      if (!(removed[i] = remove(e))) continue;
      out.segments++;
      out.bytes += e.size;
      if (incidents) out.incidents++;
    }
  }
  {
    OwnFdChange change;
    UnprotectFd(own);  // closedir closes it without the close hook
    closedir(d);
  }
  if (total_after) *total_after = total;
  return out.segments + out.expired_windows;
}

}  // namespace flightrec
