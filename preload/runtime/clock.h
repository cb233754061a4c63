// Clock: the one time base of the trace, CLOCK_MONOTONIC nanoseconds (the
// clock perf uses with use_clockid). ~29 ns through the vDSO here.
#pragma once
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <ctime>

namespace flightrec {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
// A duration in ns as the timespec nanosleep, futex and friends take.
inline timespec NsToTimespec(uint64_t ns) {
  return timespec{static_cast<time_t>(ns / 1000000000ull), static_cast<long>(ns % 1000000000ull)};
}
// The recorder's own waits: the raw system call, never the interposed
// nanosleep (sampler/hook_blocking.cc), which on an application thread would
// time the wait as the program's off-CPU and unwind the stack, and from a
// signal handler could take an unwinder's lock the interrupted code holds.
// Async-signal-safe; errno is kept.
inline void SleepNs(uint64_t ns) {
  const int saved = errno;
  timespec ts = NsToTimespec(ns);
  syscall(SYS_nanosleep, &ts, nullptr);
  errno = saved;
}
inline uint64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace flightrec
