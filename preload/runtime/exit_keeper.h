// Exit keeper: a thread kept in the program's descriptor table for one job,
// the exit(0) glibc would have made on the program's last thread after main
// left through pthread_exit (last_thread_exit.h). The atexit handlers that
// exit runs write to the program's files, so it must run in the program's
// table; the flush thread may work in one of its own (own_fd_table.h).
//
// Only a thread in the program's table can create a thread there, and the
// flush thread no longer is one once it has left. So the keeper is made by
// the main thread itself as it leaves (pthread_exit runs the thread
// registry's key destructor, last_thread_exit.cc), and only in a process
// whose flush thread has left its table or is leaving it. Most processes
// never have one; with a sampler thread of its own (FLIGHTREC_SAMPLER_THREAD=1)
// that thread makes the exit instead (sampler_thread.cc).
//
// The handshake, both sides sequentially consistent: the flush thread
// announces it is leaving, then looks whether main has left (and stays if
// it has); main announces it has left, then looks whether the flush thread
// is leaving (and makes the keeper if it is). At least one sees the other.
#pragma once

namespace flightrec {

// Flush thread, before it takes a table of its own: false if main has left
// already (no keeper can be made: stay in the program's table).
bool ExitKeeperLetFlushThreadLeave();
// Flush thread: it did not leave after all.
void ExitKeeperFlushThreadStayed();
// The main thread, leaving through pthread_exit or cancellation.
void ExitKeeperOnMainThreadExit();
// Flush thread, when the application's last thread is gone: hands the
// exit(0) to the keeper; false if there is none.
bool ExitKeeperEndsProcess();
// In a fork child: the child's only thread is the one that forked.
void ExitKeeperAtForkChild();

}  // namespace flightrec
