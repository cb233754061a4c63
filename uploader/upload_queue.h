// UploadQueue: the on-disk queue of sealed segments waiting for S3.
//
// The queue *is* the output directory. A sealed segment (`*.seg`, never
// `*.active`) that is still owner-writable is pending. After a confirmed
// upload it is deleted, or with FLIGHTREC_KEEP_LOCAL=1 made read-only (0400):
// that mode bit is the durable "already shipped" mark, so later runs and
// other processes sharing the directory never ship it again. Nothing else
// is persisted, so a crash at any point loses no segment: at worst one is
// uploaded again (same key, same bytes) if we die between the PUT and the
// delete.
//
// In memory there is only an index of candidates, oldest first (by the UTC
// stamp that starts every segment name, then name), fed by the seal hook
// (Push, from the flush thread) and by directory scans (earlier runs, forked
// children, other processes). A candidate is claimed with the per-segment
// flock (uploader/segment_lock.h) and re-checked under the lock, because
// another process may have shipped or deleted it meanwhile.
//
// Outages: failures move `next_attempt` out with capped, jittered backoff;
// segments stay on disk meanwhile (the runtime's disk budget deletes the
// oldest if the outage outlasts the budget; Claim then reports them gone).
//
// Privilege drops (preload/flush/output_dir.h): a process that dropped root writes
// to OUTPUT/uid-N, which it reaches only through a descriptor, and cannot
// enter OUTPUT any more. Its uploader is handed a descriptor of its own on
// uid-N (UsePinnedDir) and from then on scans, claims and deletes there,
// relative to it; OUTPUT itself is left to root. A queue running as root
// scans OUTPUT and, one level down, every OUTPUT/uid-N that is a real
// directory (no symlink) owned by root or by N, shipping files there owned by
// N or by us: segments of workers that exited before their own uploader
// shipped them (short-lived forked children never start one). A live worker
// may be shipping the same file at the same time: the per-segment flock
// decides, as between any two processes sharing a directory.
//
// Threading: Push() may be called from any thread (short mutex, no I/O, no
// syscalls). Everything else is the upload thread's.
#pragma once
#include <pthread.h>
#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "uploader/retry_policy.h"

namespace flightrec::uploader {

struct PendingSegment {
  std::string subdir;  // "" = the output directory itself, else a "uid-N" directory inside it
  std::string name;    // file name inside that directory
  // Name order is age order (names start with a UTC stamp).
  bool operator<(const PendingSegment& o) const { return name != o.name ? name < o.name : subdir < o.subdir; }
  std::string Key() const { return subdir.empty() ? name : subdir + "/" + name; }
};

// A claimed segment: its descriptor holds the flock until Finish/Release.
struct ClaimedSegment {
  int fd = -1;
  int dir_fd = -1;          // its directory, for unlinkat
  bool own_dir_fd = false;  // false: the queue's pinned descriptor, borrowed
  std::string path;         // for messages
  std::string name;
  uint64_t size = 0;
  int64_t mtime_seconds = 0;
};

enum class ClaimStatus {
  kClaimed,
  kBusy,     // another uploader or the disk-budget deleter holds the lock
  kGone,     // deleted or replaced since we saw it, or its directory is out of our reach
  kShipped,  // already uploaded (read-only mark) by someone else
  kForeign,  // owned by another user (and FLIGHTREC_ALLOW_FOREIGN_DIR is off)
};

class UploadQueue {
 public:
  // allow_foreign: also ship files owned by other users (FLIGHTREC_ALLOW_FOREIGN_DIR).
  explicit UploadQueue(std::string dir, bool allow_foreign = false);
  ~UploadQueue();
  UploadQueue(const UploadQueue&) = delete;
  UploadQueue& operator=(const UploadQueue&) = delete;

  const std::string& dir() const { return dir_; }
  // Upload thread: where this process's segments are now (dir(), or its uid-N).
  std::string where() const { return pinned_subdir_.empty() ? dir_ : dir_ + "/" + pinned_subdir_; }

  // Any thread: a segment was just sealed. Paths outside our directory (or
  // one of its uid-N subdirectories) or not named *.seg are ignored.
  void Push(const std::string& sealed_path);

  // Upload thread, in a process that dropped root: from now on work in
  // dir()/subdir ("uid-N") through `dir_fd`, which the queue adopts (protects
  // from the application, closes when replaced). Returns false, closing it,
  // if subdir is not a uid-N name.
  bool UsePinnedDir(int dir_fd, const std::string& subdir);
  // Upload thread: the process went back to root; work in dir() again.
  void LeavePinnedDir();

  // Upload thread: adds every pending segment in the directory to the index.
  // Returns how many new ones were found; a directory that cannot be read
  // (other than not existing yet) sets *error.
  size_t Rescan(std::string* error);

  // Oldest candidate (removed from the index), after folding in Push()es.
  bool PopOldest(PendingSegment* out);
  // Puts a candidate back (its upload failed; it stays on disk).
  void Return(const PendingSegment& segment);
  size_t size();

  ClaimStatus Claim(const PendingSegment& segment, ClaimedSegment* out);
  // After a confirmed upload: delete, or mark read-only when keep_local.
  // Releases the lock. Returns false with *error if the file could not be
  // deleted/marked (it was uploaded all the same).
  bool Finish(ClaimedSegment* claimed, bool keep_local, std::string* error);
  // Upload failed or was stopped: unlock, keep the file.
  void Release(ClaimedSegment* claimed);

  // Outage handling. OnFailure returns the wait before the next attempt:
  // transient failures back off from 1 s to 60 s, fatal ones (bad
  // credentials, no such bucket) from 30 s to 15 min; both jittered.
  void OnSuccess();
  uint64_t OnFailure(Verdict verdict, uint64_t now_ns, uint64_t random);
  uint64_t next_attempt_ns() const { return next_attempt_ns_; }
  unsigned consecutive_failures() const { return failures_; }

  // True for "*.seg" names that are not hidden; never "*.active".
  static bool IsSealedSegmentName(std::string_view name);
  // True for "uid-N" exactly as preload/flush/output_dir.h names it (N decimal, no
  // leading zeros), with N in *uid.
  static bool ParseUidDirName(std::string_view name, uid_t* uid);

 private:
  void FoldIncoming();
  size_t ScanDir(int dir_fd, const std::string& subdir);
  // A descriptor on the directory of `subdir`, and the owner its files may
  // have besides us; false (errno set) if it is out of reach or refused.
  bool OpenSegmentDir(const std::string& subdir, int* fd, bool* owned, uid_t* owner);
  void DropPinnedDir();

  const std::string dir_;
  const bool allow_foreign_;
  // Upload thread only. pinned_subdir_ non-empty: we dropped root and work
  // there only; pinned_fd_ is -1 once the application took the descriptor.
  int pinned_fd_ = -1;
  std::string pinned_subdir_;
  std::set<PendingSegment> index_;        // upload thread only
  std::unordered_set<std::string> seen_;  // Key()s in index_, to dedup scans

  pthread_mutex_t incoming_mu_ = PTHREAD_MUTEX_INITIALIZER;
  std::vector<PendingSegment> incoming_;  // guarded by incoming_mu_

  uint64_t next_attempt_ns_ = 0;
  unsigned failures_ = 0;
};

}  // namespace flightrec::uploader
