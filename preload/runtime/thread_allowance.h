// Thread allowance: whether RLIMIT_NPROC (`ulimit -u`, `prlimit --nproc`)
// leaves room for the recorder's threads. The limit counts every process and
// thread of the real user; our threads (flush, sampler, uploader) count
// against it like the program's own, so under a tight limit they took the
// threads the program then failed to create (pthread_create: EAGAIN). Like
// the descriptor and address-space limits (fd_guard.h, address_space.h),
// the recorder then stays out of the way: it starts no thread, at start nor
// later (the sampler's at go-live, the uploader's, a restart after a failed
// exec or a uid change), and says so in one line.
//
// The check is conservative rather than exact: the user's current count
// would need a walk over /proc at every process start, so a finite soft
// limit under kMinNprocForRecording is taken as "no room" whatever the
// count (docs/LIMITS.md).
#pragma once

namespace flightrec {

// Our threads (flush, sampler, uploader) and a margin for the program's.
inline constexpr unsigned long kRecorderThreads = 3;
inline constexpr unsigned long kMinNprocForRecording = 64 + kRecorderThreads;

// Pure decision: a soft limit (RLIM_INFINITY = none) leaves room.
bool NprocRoomFor(unsigned long long soft_limit);

// The same for this process now; false with the soft limit in *soft.
// No allocation; errno is kept.
bool NprocLeavesRoomForRecorder(unsigned long* soft);

// After start (the program may lower the limit): the same check, and on
// false one log line per process saying what the recorder gives up
// (`consequence`, e.g. "it starts no more threads").
bool NprocStillLeavesRoom(const char* consequence);

}  // namespace flightrec
