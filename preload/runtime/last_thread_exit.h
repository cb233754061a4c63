// Last application thread: ends the process when the application's last
// thread is gone, however it left.
//
// glibc ends a process whose main thread left through pthread_exit (or was
// cancelled) when the last remaining thread exits: it counts live threads and
// the last one calls exit(0). Our recorder threads count too, so without this
// such a process would never end, and could not even be stopped by a signal
// (recorder threads block every signal). Once the main thread has left, the
// flush thread asks ApplicationThreadsGone() every tick; when it says yes, the
// flush thread calls exit(0) itself, as glibc would have done on the last
// application thread.
//
// A main thread that leaves through the raw exit system call (a
// seccomp-strict program, ctypes' syscall(SYS_exit)) runs no destructor: it
// is seen as a zombie in /proc/self/stat, looked at once a second. When no
// application thread is left, the process ends with the status the main
// thread gave, as the kernel would have ended it without us.
#pragma once
#include <cstdint>

namespace flightrec {

// At init, after the thread registry: watches thread exits.
void LastThreadWatchInit();

// In a fork child: the child's only thread is the one that forked.
void LastThreadWatchAtForkChild();

// Flush thread, every tick: true once the main thread has left and no thread
// other than flightrec's own is alive. Cheap until the main thread leaves
// (one read of /proc/self/stat a second, for a raw exit); after that it reads
// /proc/self/task when a thread exits, every 20 ms for half a second after
// an exit, and once a second otherwise.
struct LastThreadExit {
  bool raw = false;  // the main thread left through the exit system call
  int status = 0;    // then: its exit status (the process's, without us)
};
bool ApplicationThreadsGone(uint64_t now_ns, LastThreadExit* how);

// The main thread has left (pthread_exit): the flush thread then ticks at its
// full rate, so ApplicationThreadsGone keeps the cadence described above.
bool MainThreadLeft();

}  // namespace flightrec
