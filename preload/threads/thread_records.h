// Ring records of the runtime itself: thread start, end and rename. Fixed
// size, written on the thread concerned, decoded by core_events.cc.
#pragma once
#include <cstdint>
#include <sys/types.h>

namespace flightrec {

struct ThreadStartRecord {
  uint64_t time_ns;
  uint64_t start_routine;
  int32_t tid;
  int32_t parent_tid;
  char name[16];
};

struct ThreadEndRecord {
  uint64_t time_ns;
  int32_t tid;
  int32_t pad;
  char name[16];
};

struct ThreadNameRecord {
  uint64_t time_ns;
  int32_t tid;
  int32_t pad;
  char name[16];
};

}  // namespace flightrec
