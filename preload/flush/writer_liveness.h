// Writer liveness: whether the process that writes an .active segment is
// still alive, for the disk budget (segment_files.h), which deletes the
// .active files of dead processes (killed before they could seal) like
// sealed ones, and must never delete a live writer's.
//
// Why not a held lock: a writer used to hold a shared flock on its .active
// file for its whole life. That needs a descriptor held for the whole run,
// which the program sees in /proc/self/fd and its forks inherit
// (segment_access.h). Now the writer holds one only while it writes, and
// says who it is in the segment's header instead (SPEC.md 3, the writer
// identity: boot id, pid namespace, process start time), written by
// OwnWriterIdentity below.
//
// How another process decides (WriterGone):
//  * the file's identity is our own process's: live;
//  * same boot and same pid namespace: exact. /proc/PID/stat of the
//    header's pid shows the same start time: live; another start time (the
//    pid was reused): gone; no such file: gone if kill(pid, 0) says ESRCH
//    (/proc may hide other users' processes: hidepid), live otherwise;
//  * another boot (a directory shared between machines, or a file from
//    before a reboot) or another pid namespace (containers sharing a host
//    directory): the pid means nothing here. A live writer updates its
//    file's modification time at least every kLiveWriterTouchNs (its writes
//    do, and the flush thread touches an idle one); a file untouched for
//    kForeignQuietNs is gone;
//  * no identity (a header not written yet, or a writer of an older
//    version, which held its flock): gone only when untouched for
//    kForeignQuietNs and kill(pid-from-name, 0) says ESRCH.
// On top, the budget's deletion takes an exclusive flock first, which fails
// while a writer is in the middle of a write (it holds a shared one then).
// Flush thread only.
#pragma once
#include <sys/types.h>

#include <cstdint>

#include "format/framing.h"

namespace flightrec {

inline constexpr uint64_t kLiveWriterTouchNs = 60ull * 1000000000ull;
inline constexpr uint64_t kForeignQuietNs = 10ull * 60ull * 1000000000ull;

// This process's identity (boot id, pid namespace, start time); fields it
// cannot read stay zero.
format::WriterIdentity OwnWriterIdentity();

// The decision above for an .active file: its header's pid and identity
// (identity all zero and header_pid 0 when the header is unreadable, then
// name_pid, the pid in its name, is used), its modification time and now
// (CLOCK_REALTIME ns).
bool WriterGone(uint32_t header_pid, const format::WriterIdentity& identity, pid_t name_pid, uint64_t mtime_ns,
                uint64_t now_ns);

// The same for an open .active file: reads its header and its mtime.
bool ActiveFileWriterGone(int fd, pid_t name_pid, uint64_t now_ns);

// Field 22 of /proc/<pid>/stat (clock ticks after boot); 0 if unreadable.
uint64_t ProcessStartTicks(pid_t pid);

}  // namespace flightrec
