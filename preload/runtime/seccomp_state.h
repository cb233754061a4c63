// Seccomp state: whether a seccomp filter may be in force on any thread of
// the process, so that the recorder makes no system call a filter could
// kill on that the program itself would not make.
//
// A sandboxed program (a container profile, a browser-style sandbox, a
// service that locks itself down) may install a filter that kills the
// process on calls it never makes: process_vm_readv above all, which the
// recorder used to read its own memory without faulting (libunwind's address
// checks on the program's threads, the unwinder's reads, the SIGPROF and
// crash handlers' stack copies). Such a program died of SIGSYS (exit 159)
// of a call it did not make. Once a filter is seen, those readers take their
// other roads (an rt_sigprocmask probe, a pipe: preload/fds/validation_pipe.h,
// preload/stacks/stack_unwinder.h), and the log says so once.
//
// Seen: at start, in /proc/self/status (`Seccomp: 2`, a filter inherited
// through exec from a launcher); when the program installs one through libc
// (the prctl hook, the syscall hook: PR_SET_SECCOMP, seccomp(2)), before the
// call; and again once a second on the flush thread (the main thread's
// status), for a filter installed by a raw system call. Never cleared: a
// filter cannot be removed. docs/LIMITS.md says what this does not cover.
//
// SeccompFiltered is one relaxed load: async-signal-safe, for hot paths.
#pragma once

#include <atomic>

namespace flightrec {

extern std::atomic<bool> g_seccomp_filtered;

inline bool SeccompFiltered() { return g_seccomp_filtered.load(std::memory_order_relaxed); }

// A filter is (or is about to be) in force; logs once. Async-signal-safe.
// `how` says where it was seen, for the log line.
void NoteSeccompFilter(const char* how);

// Reads the Seccomp: field of /proc/self/status (no allocation) and notes a
// filter if it is there. At start (the constructor) and from the flush
// thread's once-a-second work.
void CheckSeccompStatus();

// The FDSize: field (the size of the descriptor table: every open
// descriptor is below it) as the last CheckSeccompStatus that read the file
// saw it; 0 when none did. The start reads the status file once for both
// (each /proc read is tens of microseconds of a short-lived process's
// start on a VM, issue #39): the socket side probes that many numbers
// instead of listing /proc/self/fd.
unsigned FdTableSizeSeen();

}  // namespace flightrec
