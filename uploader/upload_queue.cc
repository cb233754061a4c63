// The on-disk upload queue: index of pending sealed segments, claim/finish
// under the per-segment lock, outage backoff.
#include "uploader/upload_queue.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "preload/fds/fd_guard.h"
#include "preload/flush/safe_path.h"
#include "uploader/segment_lock.h"

namespace flightrec::uploader {
namespace {

constexpr uint64_t kSecond = 1000000000ull;

std::string TrimSlashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Whether `name` in dir_fd now leads to another file than the one open as
// fd. A name we cannot look up (gone, or out of reach after a privilege
// drop) is left to unlinkat to report.
bool ReplacedAt(int dir_fd, const std::string& name, int fd) {
  struct stat a, b;
  if (fstat(fd, &a) != 0 || fstatat(dir_fd, name.c_str(), &b, AT_SYMLINK_NOFOLLOW) != 0) return false;
  return a.st_dev != b.st_dev || a.st_ino != b.st_ino;
}

// Owner-writable is "pending"; see the header for the read-only mark.
bool IsPendingMode(mode_t mode) { return S_ISREG(mode) && (mode & S_IWUSR) != 0; }

}  // namespace

UploadQueue::UploadQueue(std::string dir, bool allow_foreign)
    : dir_(TrimSlashes(std::move(dir))), allow_foreign_(allow_foreign) {}

UploadQueue::~UploadQueue() {
  DropPinnedDir();
  pthread_mutex_destroy(&incoming_mu_);
}

bool UploadQueue::IsSealedSegmentName(std::string_view name) {
  return name.size() > 4 && name[0] != '.' && name.substr(name.size() - 4) == ".seg";
}

bool UploadQueue::ParseUidDirName(std::string_view name, uid_t* uid) {
  if (name.size() < 5 || name.size() > 14 || name.substr(0, 4) != "uid-") return false;
  name.remove_prefix(4);
  if (name.size() > 1 && name[0] == '0') return false;
  uint64_t v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= static_cast<uid_t>(-1)) return false;  // (uid_t)-1 is "unchanged", never a uid
  *uid = static_cast<uid_t>(v);
  return true;
}

void UploadQueue::Push(const std::string& sealed_path) {
  const size_t slash = sealed_path.rfind('/');
  if (slash == std::string::npos) return;
  PendingSegment segment{"", sealed_path.substr(slash + 1)};
  if (!IsSealedSegmentName(segment.name)) return;
  const std::string dir = TrimSlashes(sealed_path.substr(0, slash));
  if (dir != dir_) {  // OUTPUT/uid-N/name: a process that dropped root
    const size_t up = dir.rfind('/');
    uid_t uid;
    if (up == std::string::npos || TrimSlashes(dir.substr(0, up)) != dir_) return;
    segment.subdir = dir.substr(up + 1);
    if (!ParseUidDirName(segment.subdir, &uid)) return;
  }
  pthread_mutex_lock(&incoming_mu_);
  incoming_.push_back(std::move(segment));
  pthread_mutex_unlock(&incoming_mu_);
}

void UploadQueue::FoldIncoming() {
  std::vector<PendingSegment> batch;
  pthread_mutex_lock(&incoming_mu_);
  batch.swap(incoming_);
  pthread_mutex_unlock(&incoming_mu_);
  for (PendingSegment& segment : batch)
    if (seen_.insert(segment.Key()).second) index_.insert(std::move(segment));
}

bool UploadQueue::UsePinnedDir(int dir_fd, const std::string& subdir) {
  uid_t uid;
  if (!ParseUidDirName(subdir, &uid)) {
    CloseTransientFd(dir_fd);
    return false;
  }
  DropPinnedDir();
  pinned_fd_ = TakeOwnFd(dir_fd);  // a daemon closing every descriptor must not close this one
  pinned_subdir_ = subdir;
  return true;
}

void UploadQueue::LeavePinnedDir() {
  DropPinnedDir();
  pinned_subdir_.clear();
}

void UploadQueue::DropPinnedDir() {
  if (pinned_fd_ < 0) return;
  CloseTransientFd(pinned_fd_);
  pinned_fd_ = -1;
}

bool UploadQueue::OpenSegmentDir(const std::string& subdir, int* fd, bool* owned, uid_t* owner) {
  *owner = geteuid();
  if (!pinned_subdir_.empty()) {
    // Dropped root: only our own uid-N, through the descriptor.
    if (subdir != pinned_subdir_) {
      errno = EACCES;
      return false;
    }
    if (pinned_fd_ >= 0 && FdWasLost(pinned_fd_)) pinned_fd_ = -1;  // the application dup2'd onto it
    if (pinned_fd_ < 0) {
      errno = EBADF;
      return false;
    }
    *fd = pinned_fd_;
    *owned = false;
    return true;
  }
  // Every descriptor here is protected while open (preload/fds/fd_guard.h): a
  // program closing all of its descriptors must not close ours and hand the
  // number to a file of its own, which we would then list, stat and close.
  // Walked from "/" the way the flush thread walks it (safe_path.h): never
  // through another user's symlink, never into a directory others may swap.
  std::string refused;
  const int top = OpenDirectoryPathSafely(dir_, /*create=*/false, allow_foreign_, &refused);
  if (top < 0) return false;  // the flush thread says why, once
  *owned = true;
  if (subdir.empty()) {
    *fd = top;
    return true;
  }
  // One level down, never through a symlink, and only directories of root or
  // of the uid in the name (what PinOutputDirForUid makes).
  uid_t uid = 0;
  const int sub =
      ParseUidDirName(subdir, &uid) ? OpenTransientFdAt(top, subdir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW) : -1;
  const int saved = errno;
  CloseTransientFd(top);
  if (sub < 0) {
    errno = saved;
    return false;
  }
  struct stat st;
  if (fstat(sub, &st) != 0 || (st.st_uid != 0 && st.st_uid != uid && !allow_foreign_)) {
    CloseTransientFd(sub);
    errno = EPERM;
    return false;
  }
  *fd = sub;
  *owner = uid;
  return true;
}

size_t UploadQueue::ScanDir(int dir_fd, const std::string& subdir) {
  // A descriptor of its own for the DIR stream: dir_fd stays the caller's.
  const int fd = OpenTransientFdAt(dir_fd, ".", O_RDONLY | O_DIRECTORY);
  DIR* d = fd >= 0 ? fdopendir(fd) : nullptr;
  if (!d) {
    CloseTransientFd(fd);
    return 0;
  }
  size_t added = 0;
  while (dirent* e = readdir(d)) {
    if (!IsSealedSegmentName(e->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !IsPendingMode(st.st_mode)) continue;
    PendingSegment segment{subdir, e->d_name};
    if (seen_.insert(segment.Key()).second) {
      index_.insert(std::move(segment));
      added++;
    }
  }
  CloseTransientDir(d);
  return added;
}

size_t UploadQueue::Rescan(std::string* error) {
  int fd = -1;
  bool owned = false;
  uid_t owner;
  const std::string& top = pinned_subdir_;  // "" unless we dropped root
  if (!OpenSegmentDir(top, &fd, &owned, &owner)) {
    // Not created yet (the flush thread makes it) is normal, not an error.
    if (errno != ENOENT) *error = "cannot scan " + where() + ": " + strerror(errno);
    return 0;
  }
  size_t added = ScanDir(fd, top);
  if (pinned_subdir_.empty() && geteuid() == 0) {
    // Root: also what processes that dropped to uid N left in uid-N.
    std::vector<std::string> subdirs;
    const int list_fd = OpenTransientFdAt(fd, ".", O_RDONLY | O_DIRECTORY);
    if (DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr) {
      uid_t uid;
      while (dirent* e = readdir(d))
        if ((e->d_type == DT_DIR || e->d_type == DT_UNKNOWN) && ParseUidDirName(e->d_name, &uid))
          subdirs.emplace_back(e->d_name);
      CloseTransientDir(d);
    } else {
      CloseTransientFd(list_fd);
    }
    for (const std::string& subdir : subdirs) {
      int sub = -1;
      bool sub_owned = false;
      if (!OpenSegmentDir(subdir, &sub, &sub_owned, &owner)) continue;  // a symlink, not ours, gone
      added += ScanDir(sub, subdir);
      if (sub_owned) CloseTransientFd(sub);
    }
  }
  if (owned) CloseTransientFd(fd);
  return added;
}

bool UploadQueue::PopOldest(PendingSegment* out) {
  FoldIncoming();
  if (index_.empty()) return false;
  *out = *index_.begin();
  index_.erase(index_.begin());
  seen_.erase(out->Key());
  return true;
}

void UploadQueue::Return(const PendingSegment& segment) {
  if (seen_.insert(segment.Key()).second) index_.insert(segment);
}

size_t UploadQueue::size() {
  FoldIncoming();
  return index_.size();
}

ClaimStatus UploadQueue::Claim(const PendingSegment& segment, ClaimedSegment* out) {
  int dir_fd = -1;
  bool own_dir = false;
  uid_t owner;
  if (!OpenSegmentDir(segment.subdir, &dir_fd, &own_dir, &owner)) return ClaimStatus::kGone;  // out of reach
  auto fail = [&](int fd, ClaimStatus status) {
    UnlockSegment(fd);
    if (own_dir) CloseTransientFd(dir_fd);
    return status;
  };
  const int fd = TryLockSegmentAt(dir_fd, segment.name.c_str());
  if (fd < 0) return fail(-1, errno == EWOULDBLOCK ? ClaimStatus::kBusy : ClaimStatus::kGone);
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(fd, ClaimStatus::kGone);
  // Checked under the lock: whoever held it before us may have shipped it.
  if (!IsPendingMode(st.st_mode)) return fail(fd, ClaimStatus::kShipped);
  // Only what we (or, in OUTPUT/uid-N, uid N) wrote: a regular file with no
  // other name. A hardlink planted in a directory another user can write to
  // (a sticky OUTPUT, a uid-N) may lead to any file of ours, root's included.
  if (!S_ISREG(st.st_mode) || st.st_nlink != 1) return fail(fd, ClaimStatus::kForeign);
  if (!allow_foreign_ && st.st_uid != owner) return fail(fd, ClaimStatus::kForeign);
  out->fd = fd;
  out->dir_fd = dir_fd;
  out->own_dir_fd = own_dir;
  out->path = (segment.subdir.empty() ? dir_ : dir_ + "/" + segment.subdir) + "/" + segment.name;
  out->name = segment.name;
  out->size = static_cast<uint64_t>(st.st_size);
  out->mtime_seconds = static_cast<int64_t>(st.st_mtim.tv_sec);
  return ClaimStatus::kClaimed;
}

bool UploadQueue::Finish(ClaimedSegment* claimed, bool keep_local, std::string* error) {
  bool ok = true;
  if (keep_local) {
    if (fchmod(claimed->fd, S_IRUSR) != 0) {
      ok = false;
      *error = "cannot mark " + claimed->path + " as uploaded: " + strerror(errno);
    }
  } else if (ReplacedAt(claimed->dir_fd, claimed->name, claimed->fd)) {
    // Renamed or replaced since the claim: what the name leads to now is not what we shipped.
    ok = false;
    *error = "uploaded " + claimed->path + " was replaced meanwhile; left in place";
  } else if (unlinkat(claimed->dir_fd, claimed->name.c_str(), 0) != 0 && errno != ENOENT) {
    ok = false;
    *error = "cannot delete uploaded " + claimed->path + ": " + strerror(errno);
  }
  Release(claimed);
  return ok;
}

void UploadQueue::Release(ClaimedSegment* claimed) {
  UnlockSegment(claimed->fd);
  claimed->fd = -1;
  if (claimed->own_dir_fd) CloseTransientFd(claimed->dir_fd);
  claimed->dir_fd = -1;
  claimed->own_dir_fd = false;
}

void UploadQueue::OnSuccess() {
  failures_ = 0;
  next_attempt_ns_ = 0;
}

uint64_t UploadQueue::OnFailure(Verdict verdict, uint64_t now_ns, uint64_t random) {
  const bool fatal = verdict == Verdict::kFatal;
  const uint64_t base = fatal ? 30 * kSecond : 1 * kSecond;
  const uint64_t cap = fatal ? 900 * kSecond : 60 * kSecond;
  // Half fixed, half jitter: processes that lost S3 together do not come back
  // in lockstep, and none of them spins.
  const uint64_t ceiling = std::max<uint64_t>(BackoffCeilingNs(failures_, base, cap), 2);
  const uint64_t wait = ceiling / 2 + random % (ceiling / 2 + 1);
  if (failures_ < 63) failures_++;
  next_attempt_ns_ = now_ns + wait;
  return wait;
}

}  // namespace flightrec::uploader
