// Segment files: the output directory (created 0700, walked and checked by
// safe_path.h), segment names that sort by time and carry service and pid,
// the seal rename (.active -> .seg) and the disk budget scan (in allocated
// blocks; windows and other segments oldest first, kept incidents last).
// Flush thread only.
#pragma once
#include <cstdint>
#include <string>

struct stat;

namespace flightrec {

// The smallest soft RLIMIT_FSIZE (`ulimit -f`) the recorder writes under: a
// segment grows by blocks of up to 1 MiB (what the flush thread buffers)
// plus a footer. Under it recording stays off (or pauses, if the program
// lowers the limit later); above it segments rotate at half the limit, so a
// block never has to pass it (format/fsize_guard.h keeps the rest safe).
inline constexpr uint64_t kMinFileSizeForRecording = 4ull << 20;

// Creates (mode 0700) or checks `dir`, walking it from "/" (safe_path.h):
// refuses a symlink, a non-directory, a directory others can write to (unless
// sticky and ours), a component another user controls and (unless
// allow_foreign) a directory owned by another user. On failure
// returns false with a one-line reason in *error.
bool PrepareOutputDirectory(const std::string& dir, bool allow_foreign, std::string* error);

// "<dir>/<UTC yyyymmddThhmmss.mmmZ>-<service>-<pid>-<seq>.active"; the service
// name is reduced to [A-Za-z0-9._-].
std::string ActiveSegmentPath(const std::string& dir, const std::string& service, uint32_t pid, uint64_t seq,
                              uint64_t realtime_ns);

// The sealed name for an active path (".active" -> ".seg").
std::string SealedSegmentPath(const std::string& active_path);

// What one budget scan deleted (budget_tally.h keeps the running totals
// that `flightrec-dump info` prints).
struct BudgetDeletions {
  uint64_t segments = 0;         // deleted to bring the directory under the budget
  uint64_t bytes = 0;            // their allocated bytes
  uint64_t incidents = 0;        // of them, kept incident segments (NAME@TAG.seg)
  uint64_t expired_windows = 0;  // window segments of exited processes, past the window
  uint64_t expired_bytes = 0;    // their allocated bytes
};

// What a file holds on disk: its allocated blocks (st_blocks * 512), which
// is what fills a disk (a 1.2 KB segment takes a 4 KiB block); st_size for a
// filesystem that reports no blocks for a non-empty file.
uint64_t AllocatedBytes(const struct stat& st);

// Deletes segments in `dir` (any process's) until the directory's segments
// take at most max_bytes of allocated blocks, in this order: sealed segments
// and the .active segments of processes that are gone (killed before
// sealing), oldest first; kept incidents (NAME@TAG.seg) only after every
// other, oldest first. `current` (our active file) counts but is never
// deleted, nor is a file someone holds a flock on (an upload in progress, a
// writer in the middle of a write); an .active file only when its writer is
// gone (writer_liveness.h). Returns how many files were deleted.
uint64_t EnforceDiskBudget(const std::string& dir, uint64_t max_bytes, const std::string& current);
// The same for the directory open as dir_fd; current_name is a file name in
// it. With total_after, also what the directory's segments total afterwards
// (left as it was when the directory cannot be read). With
// expire_windows_before_ns (CLOCK_REALTIME, window mode), first expires the
// window segments of exited processes (read-only 0400 .seg without a tag,
// the pid in the name gone) last written before it: no process is left to
// expire them. With deletions, what went, by kind.
uint64_t EnforceDiskBudgetAt(int dir_fd, uint64_t max_bytes, const std::string& current_name,
                             uint64_t* total_after = nullptr, uint64_t expire_windows_before_ns = 0,
                             BudgetDeletions* deletions = nullptr);

}  // namespace flightrec
