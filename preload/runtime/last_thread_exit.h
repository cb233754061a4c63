// Last application thread: ends the process when the application's last
// thread is gone.
//
// glibc ends a process whose main thread left through pthread_exit (or was
// cancelled) when the last remaining thread exits: it counts live threads and
// the last one calls exit(0). Our recorder threads count too, so without this
// such a process would never end, and could not even be stopped by a signal
// (recorder threads block every signal). Once the main thread has left, the
// flush thread asks ApplicationThreadsGone() every tick; when it says yes, the
// flush thread calls exit(0) itself, as glibc would have done on the last
// application thread.
#pragma once
#include <cstdint>

namespace flightrec {

// At init, after the thread registry: watches thread exits.
void LastThreadWatchInit();

// In a fork child: the child's only thread is the one that forked.
void LastThreadWatchAtForkChild();

// Flush thread, every tick: true once the main thread has left and no thread
// other than flightrec's own is alive. Cheap until the main thread leaves;
// after that it reads /proc/self/task when a thread exits, every 20 ms for
// half a second after an exit, and once a second otherwise.
bool ApplicationThreadsGone(uint64_t now_ns);

// The main thread has left (pthread_exit): the flush thread then ticks at its
// full rate, so ApplicationThreadsGone keeps the cadence described above.
bool MainThreadLeft();

}  // namespace flightrec
