// Log: one-line messages to stderr, "flightrec: ...", filtered by
// FLIGHTREC_LOG. Formats into a stack buffer and write(2)s it: no host
// malloc, no stdio locks, so it is safe from any recorder thread. Not for hot
// paths (hooks and signal handlers never log).
#pragma once
#include "preload/runtime/config.h"

namespace flightrec {

// At start, before anything is logged: remember which file stderr is. A line
// is written only while fd 2 is still that file (see log.cc).
void InitLogTarget();
void SetLogLevel(LogLevel level);
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// Logs only the first time `once_flag` is seen false; sets it.
void LogOnce(bool* once_flag, LogLevel level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

}  // namespace flightrec
