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

#include "uploader/segment_lock.h"

namespace flightrec::uploader {
namespace {

constexpr uint64_t kSecond = 1000000000ull;

std::string TrimSlashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Owner-writable is "pending"; see the header for the read-only mark.
bool IsPendingMode(mode_t mode) { return S_ISREG(mode) && (mode & S_IWUSR) != 0; }

}  // namespace

UploadQueue::UploadQueue(std::string dir, bool allow_foreign)
    : dir_(TrimSlashes(std::move(dir))), allow_foreign_(allow_foreign) {}

UploadQueue::~UploadQueue() { pthread_mutex_destroy(&incoming_mu_); }

bool UploadQueue::IsSealedSegmentName(std::string_view name) {
  return name.size() > 4 && name[0] != '.' && name.substr(name.size() - 4) == ".seg";
}

void UploadQueue::Push(const std::string& sealed_path) {
  const size_t slash = sealed_path.rfind('/');
  if (slash == std::string::npos) return;
  if (TrimSlashes(sealed_path.substr(0, slash)) != dir_) return;
  std::string name = sealed_path.substr(slash + 1);
  if (!IsSealedSegmentName(name)) return;
  pthread_mutex_lock(&incoming_mu_);
  incoming_.push_back(std::move(name));
  pthread_mutex_unlock(&incoming_mu_);
}

void UploadQueue::FoldIncoming() {
  std::vector<std::string> batch;
  pthread_mutex_lock(&incoming_mu_);
  batch.swap(incoming_);
  pthread_mutex_unlock(&incoming_mu_);
  for (std::string& name : batch)
    if (seen_.insert(name).second) index_.insert(PendingSegment{std::move(name)});
}

size_t UploadQueue::Rescan(std::string* error) {
  DIR* d = opendir(dir_.c_str());
  if (!d) {
    // Not created yet (the flush thread makes it) is normal, not an error.
    if (errno != ENOENT) *error = "cannot scan " + dir_ + ": " + strerror(errno);
    return 0;
  }
  size_t added = 0;
  while (dirent* e = readdir(d)) {
    if (!IsSealedSegmentName(e->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !IsPendingMode(st.st_mode)) continue;
    if (seen_.insert(e->d_name).second) {
      index_.insert(PendingSegment{e->d_name});
      added++;
    }
  }
  closedir(d);
  return added;
}

bool UploadQueue::PopOldest(PendingSegment* out) {
  FoldIncoming();
  if (index_.empty()) return false;
  // Names start with a UTC timestamp (preload/segment_files.h): name order is age order.
  *out = *index_.begin();
  index_.erase(index_.begin());
  seen_.erase(out->name);
  return true;
}

void UploadQueue::Return(const PendingSegment& segment) {
  if (seen_.insert(segment.name).second) index_.insert(segment);
}

size_t UploadQueue::size() {
  FoldIncoming();
  return index_.size();
}

ClaimStatus UploadQueue::Claim(const PendingSegment& segment, ClaimedSegment* out) {
  const std::string path = dir_ + "/" + segment.name;
  int fd = TryLockSegment(path.c_str());
  if (fd < 0) return errno == EWOULDBLOCK ? ClaimStatus::kBusy : ClaimStatus::kGone;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    UnlockSegment(fd);
    return ClaimStatus::kGone;
  }
  // Checked under the lock: whoever held it before us may have shipped it.
  if (!IsPendingMode(st.st_mode)) {
    UnlockSegment(fd);
    return ClaimStatus::kShipped;
  }
  if (!allow_foreign_ && st.st_uid != geteuid()) {
    UnlockSegment(fd);
    return ClaimStatus::kForeign;
  }
  out->fd = fd;
  out->path = path;
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
  } else if (unlink(claimed->path.c_str()) != 0 && errno != ENOENT) {
    ok = false;
    *error = "cannot delete uploaded " + claimed->path + ": " + strerror(errno);
  }
  UnlockSegment(claimed->fd);
  claimed->fd = -1;
  return ok;
}

void UploadQueue::Release(ClaimedSegment* claimed) {
  UnlockSegment(claimed->fd);
  claimed->fd = -1;
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
