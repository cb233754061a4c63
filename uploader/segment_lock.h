// Segment locks: the one mutual-exclusion rule for sealed segment files.
//
// Whoever uploads or deletes a sealed segment first holds an exclusive
// flock() on the segment file itself (opened O_RDONLY). Several processes
// sharing one FLIGHTREC_OUTPUT therefore never upload the same segment twice,
// and the disk-budget deleter never removes a file mid-upload. flock locks
// belong to the open file description, so they also exclude a second open
// within the same process, and the kernel drops them when the holder dies.
// They do not depend on who holds them: a root process shipping a leftover
// in OUTPUT/uid-N and the uid-N worker that wrote it exclude each other too.
//
// Files are named relative to a directory descriptor (AT_FDCWD for a path):
// a process that dropped root reaches its OUTPUT/uid-N only through one.
//
// Plain C strings and no allocation: callable from the flush thread.
#pragma once
#include <fcntl.h>

namespace flightrec::uploader {

// Opens `name` relative to `dir_fd` (O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC),
// takes flock(LOCK_EX|LOCK_NB), and checks that the name still refers to the
// file just locked (not unlinked or replaced meanwhile). Returns the
// descriptor holding the lock, or -1 with errno = EWOULDBLOCK (someone else
// holds it), ENOENT (gone or replaced), EINVAL (not a regular file) or the
// open error.
int TryLockSegmentAt(int dir_fd, const char* name);
inline int TryLockSegment(const char* path) { return TryLockSegmentAt(AT_FDCWD, path); }

// Releases a lock from TryLockSegmentAt (closes the descriptor).
void UnlockSegment(int fd);

// For the disk-budget deleter: lock, unlink, unlock. Returns true if this call
// deleted the file; false if it is locked (being uploaded) or already gone.
bool TryDeleteSegmentAt(int dir_fd, const char* name);
inline bool TryDeleteSegment(const char* path) { return TryDeleteSegmentAt(AT_FDCWD, path); }

}  // namespace flightrec::uploader
