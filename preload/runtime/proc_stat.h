// Reading a /proc stat file once (this process's, or one of its threads'),
// for the few fields the recorder needs (its start time, the leader's state
// and exit code, whether a thread is runnable): one protected transient
// descriptor (fd_guard.h), no allocation.
#pragma once

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "preload/fds/fd_guard.h"

namespace flightrec {

// Reads a stat file (/proc/self/stat, /proc/self/task/TID/stat) into buf
// and returns where field 3 (the state) begins: after the last ')', since
// the command name (field 2) may hold spaces and ')'. nullptr if it cannot
// be read.
inline const char* ReadStatFields(const char* path, char* buf, size_t size) {
  const int fd = OpenTransientFd(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  const ssize_t n = read(fd, buf, size - 1);
  CloseTransientFd(fd);
  if (n <= 0) return nullptr;
  buf[n] = 0;
  const char* close_paren = strrchr(buf, ')');
  if (!close_paren || close_paren[1] != ' ') return nullptr;
  return close_paren + 2;
}

inline const char* ReadOwnStatFields(char* buf, size_t size) { return ReadStatFields("/proc/self/stat", buf, size); }

}  // namespace flightrec
