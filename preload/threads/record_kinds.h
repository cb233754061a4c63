// Record kinds: the fixed-size records that hot paths push into per-thread
// rings. Numbers are allocated in ranges per producer so features never clash.
// The flush thread decodes each kind with the function registered for it
// (RegisterRecordKind, preload/flush/flush_registry.h). Drops are counted per
// kind (ThreadState::dropped, thread_registry.h).
#pragma once
#include <cstdint>

namespace flightrec {

enum RecordKind : uint16_t {
  kRecPadding = 0,
  // runtime (preload/threads/thread_records.h, decoded by preload/runtime/core_events.cc)
  kRecThreadStart = 1,
  kRecThreadEnd = 2,
  kRecThreadName = 3,
  // allocations (preload/alloc/alloc_events.h)
  kRecAllocSample = 10,
  kRecAllocFree = 11,
  kRecAllocSampleRef = 12,  // a sample whose stack the thread pushed before (alloc/stack_refs.h)
  // sampling (sampler/)
  kRecCpuSample = 20,    // reserved: no longer pushed (SIGPROF samples travel in the sampler's own
                         // per-thread rings, sampler/sigprof_sampler.cc)
  kRecOffCpuBlock = 21,  // a blocking call longer than FLIGHTREC_OFFCPU_MIN_US (sampler/offcpu_blocking.cc)
  // sockets (preload/sockets/socket_records.h, socket_exchange.h)
  kRecSocketOp = 30,
  kRecSocketAddr = 31,
  kRecSocketExchange = 32,  // one request/response exchange of a descriptor
  // crash capture (preload/crash/crash_handler.cc, term_signals.h)
  kRecCrash = 40,
  kRecCrashRecovered = 41,  // the application's handler returned: it went on
  kRecProcessKilled = 42,   // a termination signal at its default action
  kRecordKindCount = 64,
};

}  // namespace flightrec
