// Segment files: the output directory (created 0700, walked and checked by
// safe_path.h), segment names that sort by time and carry service and pid,
// the seal rename (.active -> .seg) and the disk budget (oldest sealed
// segments deleted first). Flush thread only.
#pragma once
#include <cstdint>
#include <string>

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
std::string ActiveSegmentPath(const std::string& dir, const std::string& service, uint32_t pid,
                              uint64_t seq, uint64_t realtime_ns);

// The sealed name for an active path (".active" -> ".seg").
std::string SealedSegmentPath(const std::string& active_path);

// Deletes the oldest sealed segments in `dir` (any process's) until the
// directory's segments total at most max_bytes; .active segments of
// processes that are gone (killed before sealing) go in the same age order.
// `current` (our active file) counts but is never deleted, nor is a file
// someone holds a flock on (an upload in progress, a live writer). Returns
// how many files were deleted.
uint64_t EnforceDiskBudget(const std::string& dir, uint64_t max_bytes, const std::string& current);
// The same for the directory open as dir_fd; current_name is a file name in
// it. With total_after, also what the directory's segments total afterwards
// (left as it was when the directory cannot be read).
uint64_t EnforceDiskBudgetAt(int dir_fd, uint64_t max_bytes, const std::string& current_name,
                             uint64_t* total_after = nullptr);

}  // namespace flightrec
