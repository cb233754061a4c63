// Flush registry: how producers plug into the flush thread.
//
// At init (before any thread records), each feature registers:
//  * its event types (DefineEventType; ids are stable for the process),
//  * a decoder per record kind it pushes into rings,
//  * optionally a periodic source (perf mmap rings, rusage, accept queues),
//  * optionally a seal hook (e.g. the uploader wants sealed paths).
// Everything registered here runs only on the flush thread, never on hot paths,
// so it may allocate (the recorder's threads allocate from mimalloc) and block.
#pragma once
#include <cstdint>
#include <string>

#include "format/segment_writer.h"
#include "preload/threads/ring.h"

namespace flightrec {

struct ThreadState;

struct FlushContext {
  format::SegmentWriter* writer;  // the active segment
  ThreadState* thread;            // ring being drained; nullptr for sources
  uint64_t now_ns;                // CLOCK_MONOTONIC at the start of this tick
  bool final_tick = false;        // the last tick before the segment is sealed at exit/exec/crash
  // Records and queued samples this tick handled (ring records are counted
  // by the drain; a source adds what it took from its own queue). Zero means
  // the process was quiet since the last tick: the flush thread then sleeps
  // longer (flush_thread.cc, idle backoff).
  uint64_t work = 0;
  // Every ring was drained at or after this time: the tick's start, or the
  // last full scan when this tick passed over quiet slots (slot_scan.h); 0
  // (contexts made outside a tick): the tick's start. Records completed
  // earlier have all been decoded, whatever their thread: ordering across
  // threads (the socket connection table) waits for it.
  uint64_t all_drained_ns = 0;
  uint64_t AllDrainedNs() const { return all_drained_ns ? all_drained_ns : now_ns; }
};

using RecordDecodeFn = void (*)(FlushContext& ctx, const RecordHeader& header, const void* payload);
using FlushSourceFn = void (*)(FlushContext& ctx);
using SealHookFn = void (*)(const std::string& sealed_path);
using ShutdownHookFn = void (*)(uint64_t deadline_monotonic_ns);
// After a thread's ring was drained (ctx.thread set), before its slot may be
// freed: for state the thread keeps beside its ring (socket_gaps.h).
using ThreadDrainedFn = void (*)(FlushContext& ctx);

uint32_t DefineEventType(const format::EventTypeSpec& spec);
// discard (optional) sees the records drained while no segment is open
// (ctx.writer unusable), which decode never sees: for state a decoder keeps
// across records (stack references, stack_refs.h).
void RegisterRecordKind(uint16_t kind, const char* name, RecordDecodeFn decode, RecordDecodeFn discard = nullptr);
const char* RecordKindName(uint16_t kind);
void RegisterFlushSource(FlushSourceFn fn);
void RegisterSealHook(SealHookFn fn);
// A segment sealed earlier became ready to ship: window mode kept it for an
// incident (preload/flush/window_keeper.h) and renamed it; `path` is its new
// name. The uploader registers here (continuous mode never calls it).
void RegisterShipHook(SealHookFn fn);
void RegisterShutdownHook(ShutdownHookFn fn);  // run at exit after the final seal
void RegisterThreadDrainedHook(ThreadDrainedFn fn);
// The recorder goes live (flush_thread.h): its first tick, FLIGHTREC_FLUSH_MS
// after start unless a ring's nudge comes first. A process that is gone or
// exec'd by then never pays for what these start (the sampler's thread).
// Run once per process image on the flush thread, before the segment opens.
using LiveHookFn = void (*)();
void RegisterLiveHook(LiveHookFn fn);
// The same moment, for a hook that starts a thread which must share the
// program's descriptor table (the sampler's): run before the flush thread
// takes a table of its own (preload/fds/own_fd_table.h), and before the
// other live hooks, whose files (libdw's libraries) it then opens there.
void RegisterLiveThreadHook(LiveHookFn fn);
// The process is ending (exit, _exit, the last thread gone): run on the flush
// thread just before its final drain, so a producer that buffers elsewhere
// (the sampler's perf rings) hands over what it holds. Never on a program's
// thread: the exiting thread only waits (flush_thread.h).
void RegisterFinalHook(LiveHookFn fn);
// A producer that buffers where the flush thread does not look (the kernel's
// perf rings, drained only by the sampler thread that going live starts)
// holds only so much: the recorder then goes live no later than `ns` after
// start, whatever FLIGHTREC_FLUSH_MS says. Call before the flush thread
// starts (at init); the smallest bound wins.
void GoLiveWithin(uint64_t ns);
uint64_t GoLiveWithinNs();  // UINT64_MAX when nobody asked

}  // namespace flightrec
