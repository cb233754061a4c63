// The flush thread's side of the flush registry (see flush_registry.h).
#pragma once
#include <string>

#include "preload/flush/flush_registry.h"

namespace flightrec {

// Defines every registered event type on a fresh writer, in registration
// order, so ids match those DefineEventType returned.
void DefineAllEventTypes(format::SegmentWriter* writer);
RecordDecodeFn DecoderFor(uint16_t kind);
RecordDecodeFn DiscarderFor(uint16_t kind);  // null: nothing to do for a discarded record
void RunFlushSources(FlushContext& ctx);
void RunSealHooks(const std::string& path);
void RunShipHooks(const std::string& path);
void RunShutdownHooks(uint64_t deadline_ns);
void RunLiveThreadHooks();  // before the flush thread takes its own descriptor table
void RunLiveHooks();
void RunFinalHooks();
void RunThreadDrainedHooks(FlushContext& ctx);

}  // namespace flightrec
