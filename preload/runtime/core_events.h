// Core events: the runtime's own event types (process.start, process.env, process.rusage,
// thread.start/name/end; recorder.dropped is defined here, in its place in
// the schema, and written by the drop ledger, drop_ledger.h) and their emitters. Everything
// here runs on the flush thread except RegisterCoreEvents (init).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "preload/flush/drop_ledger.h"  // EmitGlobalDrops, AddFooterDrop for producers
#include "preload/flush/flush_registry.h"

namespace flightrec {

struct ThreadState;

struct ProcessInfo {
  uint32_t pid = 0, ppid = 0;
  std::string exe, cmdline, hostname, service, sampler;
  // FLIGHTREC_RECORD_ENV=1 only; credentials already redacted (redaction.h).
  std::vector<std::pair<std::string, std::string>> env;
  uint64_t realtime_ns = 0, monotonic_ns = 0;  // taken together
  // A forked child's: exe, cmdline, env, hostname and service are still to
  // be read (CollectProcessDetails), by its flush thread when the child's
  // first segment opens. A child that execs at once never reads them.
  bool details_pending = false;
};

// Collects pid, exe, cmdline (unless disabled; credentials redacted), the
// environment (only if enabled; redacted), hostname and service name.
ProcessInfo CollectProcessInfo();
// What a forked child knows without reading a file or allocating: pid,
// ppid and the time (details_pending set).
ProcessInfo ForkedChildProcessInfo();
// Fills exe, cmdline, env, hostname and service; clears details_pending.
void CollectProcessDetails(ProcessInfo* p);

void RegisterCoreEvents();
void EmitProcessStart(format::SegmentWriter* writer, const ProcessInfo& info, uint64_t now_ns);
void EmitRusage(FlushContext& ctx);
// For a retired thread whose own thread.end record was dropped (full ring):
// writes thread.end from what the slot knows (tid, last name), stamped with
// the drain time, so the thread's end is still in the trace. The drop itself
// stays counted.
void EmitThreadEndIfDropped(FlushContext& ctx, ThreadState* ts);
// Re-reads /proc/self/task/<tid>/comm of a live thread; emits thread.name on
// change, stamped `now`. The caller reads the clock after the tick's drain: a
// thread that registered during the tick must not get a rename stamped
// before its own start.
void RefreshThreadName(FlushContext& ctx, ThreadState* ts, uint64_t now);

}  // namespace flightrec
