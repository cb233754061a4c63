// Record kinds: the fixed-size records that hot paths push into per-thread
// rings. Numbers are allocated in ranges per producer so features never clash.
// The flush thread decodes each kind with the function registered for it
// (see flush_registry.h). Drops are counted per kind.
#pragma once
#include <cstdint>

namespace flightrec {

enum RecordKind : uint16_t {
  kRecPadding = 0,
  // runtime (preload/)
  kRecThreadStart = 1,
  kRecThreadEnd = 2,
  kRecThreadName = 3,
  // allocations (preload/alloc_*)
  kRecAllocSample = 10,
  kRecAllocFree = 11,
  kRecAllocSampleRef = 12,  // a sample whose stack the thread pushed before (stack_refs.h)
  // sampling (sampler/)
  kRecCpuSample = 20,      // SIGPROF fallback: registers + stack copy
  kRecOffCpuBlock = 21,    // a blocking call longer than FLIGHTREC_OFFCPU_MIN_US
  // sockets (preload/socket_*)
  kRecSocketOp = 30,
  kRecSocketAddr = 31,
  kRecSocketExchange = 32,  // one request/response exchange of a descriptor (socket_exchange.h)
  // crash capture
  kRecCrash = 40,
  kRecCrashRecovered = 41,  // the application's handler returned: it went on
  kRecProcessKilled = 42,   // a termination signal at its default action (term_signals.h)
  kRecordKindCount = 64,
};

}  // namespace flightrec
