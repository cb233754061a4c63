// The output directory as a descriptor: the flush thread creates, seals and
// deletes segments relative to it (openat/renameat/unlinkat), never through
// the path.
//
// Normally it is FLIGHTREC_OUTPUT, checked (and created) by path before each
// segment, so a directory removed under us comes back. A process started as
// root that drops to uid N (setuid & co., preload/hook_setuid.cc) can no
// longer enter the root-owned 0700 directory; while still root it pins
// OUTPUT/uid-N instead: created 0700, owned by N, opened without following
// symlinks. From then on that process (and its forked children) writes there
// through the descriptor; the directory can no longer be re-created by path.
//
// Not thread-safe: used by whoever owns the segment writer (the flush thread,
// or a thread that stopped it: exit, exec, a privilege drop).
#pragma once
#include <sys/types.h>

#include <string>

namespace flightrec {

struct OutputDir {
  int fd = -1;       // owned by this module; valid until the next call
  std::string path;  // for messages and seal hooks
};

// Before each segment: the directory to create it in. On failure returns
// false with a one-line reason in *error.
bool CurrentOutputDir(const std::string& configured, bool allow_foreign, OutputDir* out, std::string* error);

// The name of the per-uid subdirectory ("uid-<uid>").
std::string UidDirName(uid_t uid);

// While the effective uid is still 0, before it becomes `uid` (non-zero):
// creates or checks configured/uid-<uid> and makes it the output directory.
// An existing one must be a real directory owned by root or `uid`; it is
// then chowned to `uid` and chmodded 0700. On failure nothing changes.
bool PinOutputDirForUid(const std::string& configured, bool allow_foreign, uid_t uid, std::string* error);

// The privilege drop failed: back to the configured directory.
void UnpinOutputDir();

bool OutputDirPinned();

}  // namespace flightrec
