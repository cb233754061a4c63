// Recorder threads: flightrec's own threads ("flightrec-flush",
// "flightrec-upload"). They are created with every signal blocked (so the
// host's signals are never delivered to us), bypass our pthread_create hook
// (sanitizer builds go through it, flagged as ours),
// mark themselves so nothing they do is recorded or sampled, and run at
// nice +10 so the host's threads win the CPU.
#pragma once
#include <pthread.h>
#include <sys/types.h>

#include <cerrno>

namespace flightrec {

// Returns 0 or an errno value, like pthread_create; kRefusedForNproc (logged
// here, once) when RLIMIT_NPROC leaves no room for our threads
// (thread_allowance.h): no thread is created, the caller need not log.
inline constexpr int kRefusedForNproc = EUSERS;
int CreateRecorderThread(pthread_t* thread, const char* name, void* (*fn)(void*), void* arg);

// A thread about to wait for recorder thread `tid` (exit, exec, crash) lets it run
// in the caller's scheduling class at the caller's priority, where the system
// allows it (root, CAP_SYS_NICE, RLIMIT_RTPRIO / RLIMIT_NICE): busy host
// threads, real-time ones above all, would otherwise keep a nice +10 thread
// off the CPU for as long as they run. Failures are ignored; errno is kept.
void LiftRecorderThread(pid_t tid);

// The calling recorder thread back to where it started (SCHED_OTHER, nice
// +10) after a lift for a crash flush the process survived: a thread lifted
// into the program's real-time class must not stay there.
void SettleRecorderThread();

// The libc pthread_create, never our hook.
using PthreadCreateFn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
PthreadCreateFn RealPthreadCreate();

// True on a thread while it creates a recorder thread: tells our
// pthread_create hook (reached only in sanitizer builds) the new thread is ours.
extern __thread bool t_creating_recorder_thread __attribute__((tls_model("initial-exec")));

}  // namespace flightrec
