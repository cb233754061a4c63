// Per-segment exclusive flock(), shared by the uploader and the disk-budget deleter.
#include "uploader/segment_lock.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload/fds/fd_guard.h"

namespace flightrec::uploader {

// The lock's descriptor is also what an upload reads the segment through, for
// as long as the upload takes. So it is one of ours (OpenOwnFdAt):
// high, where programs do not dup2, and protected, so that a program closing
// every descriptor meanwhile (close_range, closefrom) cannot close it and
// hand its number to a file of its own, which the upload would then read and
// send, and the unlock close.
int TryLockSegmentAt(int dir_fd, const char* name) {
  const int fd = OpenOwnFdAt(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat locked;
  if (fstat(fd, &locked) != 0 || !S_ISREG(locked.st_mode)) {
    CloseTransientFd(fd);
    errno = EINVAL;
    return -1;
  }
  int rc;
  do rc = flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int saved = errno;
    CloseTransientFd(fd);
    errno = saved;
    return -1;
  }
  // Between open() and flock() another holder may have deleted or replaced the
  // file: only a lock on the inode the name refers to now is worth anything.
  struct stat now;
  if (fstat(fd, &locked) != 0 || locked.st_nlink == 0 || fstatat(dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) != 0 ||
      now.st_dev != locked.st_dev || now.st_ino != locked.st_ino) {
    CloseTransientFd(fd);
    errno = ENOENT;
    return -1;
  }
  return fd;
}

void UnlockSegment(int fd) {
  CloseTransientFd(fd);  // closing the last descriptor releases the flock
}

bool TryDeleteSegmentAt(int dir_fd, const char* name) {
  int fd = TryLockSegmentAt(dir_fd, name);
  if (fd < 0) return false;
  bool ok = unlinkat(dir_fd, name, 0) == 0;
  UnlockSegment(fd);
  return ok;
}

}  // namespace flightrec::uploader
