// The output directory as a descriptor: the flush thread creates, seals and
// deletes segments relative to it (openat/renameat/unlinkat).
//
// Normally it is FLIGHTREC_OUTPUT, opened for each use and closed right
// after (the application keeps every descriptor but the segment's), and
// checked (created if missing) before each new segment, so a directory
// removed under us comes back. A process started as root that drops to uid
// N (setuid & co., preload/runtime/hook_setuid.cc) can no longer enter the
// root-owned 0700 directory; while still root it pins OUTPUT/uid-N instead:
// created 0700, owned by N, opened without following symlinks, and held open
// (one protected descriptor) because its path is unreachable from then on,
// for this process and its forked children. It cannot be re-created if
// removed.
//
// Not thread-safe: used by whoever owns the segment writer (the flush thread,
// or a thread that stopped it: exit, exec, a privilege drop).
#pragma once
#include <sys/types.h>

#include <string>

namespace flightrec {

// One use of the directory's descriptor; closes it unless it is the pinned one.
class OutputDir {
 public:
  OutputDir() = default;
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }  // for messages and seal hooks

 private:
  friend bool OpenOutputDir(const std::string&, bool, bool, OutputDir*, std::string*);
  int fd_ = -1;
  bool owned_ = false;
  std::string path_;
};

// The directory to use now. prepare: check it (create it if missing) first,
// as before a new segment. On failure returns false with a one-line reason.
bool OpenOutputDir(const std::string& configured, bool allow_foreign, bool prepare, OutputDir* out, std::string* error);

// The name of the per-uid subdirectory ("uid-<uid>").
std::string UidDirName(uid_t uid);

// While the effective uid is still 0, before it becomes `uid` (non-zero):
// creates or checks configured/uid-<uid> and pins it. An existing one must
// be a real directory owned by root or `uid`; it is then chowned to `uid`
// and chmodded 0700. On failure nothing changes.
bool PinOutputDirForUid(const std::string& configured, bool allow_foreign, uid_t uid, std::string* error);

// The privilege drop failed: back to the configured directory.
void UnpinOutputDir();

bool OutputDirPinned();

// A descriptor of its own on the pinned directory, for the uploader (which
// runs on its own thread and must outlive a later re-pin), with the
// directory's path; -1 if nothing is pinned or it cannot be reopened. It
// comes high and protected (preload/fds/fd_guard.h); the caller owns it and
// closes it with CloseTransientFd.
int ReopenPinnedOutputDir(std::string* path);

}  // namespace flightrec
