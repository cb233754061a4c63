// Crash freeze: while the application's own crash handler runs (after the
// crash is recorded and sealed), flightrec's threads park and its SIGPROF
// timers stop, so nothing of ours runs or writes memory. A crash report may test memory in place:
// redis-server's fast memory test writes patterns into every anonymous
// read-write mapping, ours included, then restores it. A recorder thread
// writing its ring, heap or stack meanwhile made it report "MEMORY ERROR
// DETECTED" for RAM that was fine, or had its own stack restored from under
// it (SIGBUS, SIGSEGV). Even reading is unsafe then: a SIGPROF handler that
// read one of our globals while it held a test pattern crashed.
//
// Threads: Begin/End on the crashing thread, inside the signal handler (only
// async-signal-safe calls: atomics, futex, nanosleep, eventfd writes). Park
// on the recorder threads that joined. Frozen from any thread.
#pragma once
#include <cstdint>

namespace flightrec {

// Raises the flag, stops the SIGPROF timers, wakes the recorder threads and
// waits (at most 100 ms) until every one that joined is parked.
void CrashFreezeBegin();
// The program went on (its handler returned or left by siglongjmp): the
// timers run again and the parked threads go on.
void CrashFreezeEnd();
// For the SIGPROF handler: take no sample while frozen (a signal queued
// before the timers stopped).
bool CrashFrozen();
// Recorder threads, after every wake-up: blocks while frozen, never longer
// than 5 s after the freeze began (a handler that left by siglongjmp is only
// noticed at the next crash signal or exit; recording goes on meanwhile).
void CrashFreezePark();
// Recorder threads that park register at start and leave at exit, so that
// Begin knows how many to wait for.
void CrashFreezeJoin();
void CrashFreezeLeave();
// In a fork child, before its recorder threads start again: none is a member.
void CrashFreezeResetInChild();

}  // namespace flightrec
