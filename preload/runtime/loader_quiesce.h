// The recorder's own dlopen calls, made on its threads after start-up
// (libdw at the first symbolization, libcurl and libcrypto for S3), and the
// uploader's library initialisation (RecorderForkFenced).
//
// Why: dlopen holds glibc's dl_load_write_lock while it adds the library to
// the loaded list, and glibc 2.36 does not reset that lock in a fork child;
// a child forked meanwhile hangs in its first dlopen or dl_iterate_phdr.
// RecorderDlopen counts itself with the recorder's loader walks, which the
// application's fork waits for (hook_dl_iterate_phdr.cc).
#pragma once
#include <dlfcn.h>

#include "format/own_fds.h"

namespace flightrec {

// Defined beside the dl_iterate_phdr hook; weak so that code linked without
// the hooks (unit tests) falls back to a plain dlopen.
void* RecorderDlopen(const char* file, int flags) __attribute__((weak));

// Also one of our descriptor changes (format/own_fds.h): the loader's opens
// take the lowest free numbers, and a program's close_range/closefrom in
// the middle would close one under the loader and hand its number to the
// program's next file, which the loader then maps or closes (seen: libdw
// "failed to map segment" and a program's socket closed, in a close storm).
// The program's bulk close waits for the load (bounded).
inline void* OwnDlopen(const char* file, int flags) {
  format::OwnFdChange loading;
  return RecorderDlopen ? RecorderDlopen(file, flags) : dlopen(file, flags);
}

// Runs fn(arg) on one of the recorder's threads counted like a loader walk:
// the application's fork waits for it (bounded, as for a walk), so a child
// never inherits a lock fn held. For short, bounded work that takes a
// library's global locks (the uploader's libcurl and OpenSSL initialisation:
// curl's global-init lock, OpenSSL's run-once controls). Never nest it, or a
// RecorderDlopen, inside fn. Weak, like RecorderDlopen: without the hooks
// (unit tests) fn just runs.
void RecorderForkFenced(void (*fn)(void*), void* arg) __attribute__((weak));

inline void OwnForkFenced(void (*fn)(void*), void* arg) {
  if (RecorderForkFenced) {
    RecorderForkFenced(fn, arg);
  } else {
    fn(arg);
  }
}

}  // namespace flightrec
