// File-size limit guard: the recorder's own writes to files (segments, the
// budget tally, log lines on a stderr that is a file) never raise SIGXFSZ.
//
// Under RLIMIT_FSIZE (`ulimit -f`) a write(2) that would pass the limit
// sends SIGXFSZ to the writing thread, whose default action kills the
// process (exit 153): a write of ours on a program thread (the first
// segment's header at start, the last block at exit or exec) killed a
// program that, plain, never wrote past its limit. So every such write is
// checked against the soft limit first (a write that would pass it is not
// attempted) and made with SIGXFSZ blocked on the calling thread: if the
// program lowers the limit between the check and the write, the write fails
// with EFBIG and the signal it raised is taken back (never delivered), unless
// one was already pending for the program itself.
//
// Async-signal-safe, no allocation; errno is the write's.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace flightrec::format {

// The soft RLIMIT_FSIZE in bytes; UINT64_MAX when unlimited (or unknown).
uint64_t FileSizeLimit();

// Whether a file may grow to `end` bytes under the current soft limit.
inline bool FileSizeAllows(uint64_t end) { return end <= FileSizeLimit(); }

// write(2) (the raw system call) of [buf, buf+n) to fd at its offset, with
// SIGXFSZ blocked: -1 and EFBIG instead of a signal. The caller checks the
// limit first when it knows the file's size (FileSizeAllows).
ssize_t WriteWithoutSigxfsz(int fd, const void* buf, size_t n);
// pwrite(2) the same way.
ssize_t PwriteWithoutSigxfsz(int fd, const void* buf, size_t n, off_t offset);

}  // namespace flightrec::format
