// Allocation profiler: the decisions and records behind the malloc hooks
// (preload/alloc/hook_malloc.cc), and its init.
//
// Split of work:
//  * hook_malloc.cc: the interposed functions; the unsampled path is the
//    countdown of alloc_sampler.h and nothing else.
//  * here: what happens when a countdown expires (sample or not), the sampled
//    path (stack capture on the app thread, ring record, address set), and
//    the free side (report frees of sampled addresses).
//
// realloc of a sampled block: the old block is reported freed (alloc.free,
// timed before the real realloc runs), and the new block is an ordinary
// allocation of the new size, sampled by the countdown like any other. A
// failed realloc leaves the old block sampled and reports nothing.
//
// Not sampled, by design: allocations made while this thread is inside our
// own sampled path (libunwind's, thread registration's, or those of a signal
// handler that interrupted it) -- never recursing comes first; and, for a
// thread that existed before init, at most its first 64 KiB after init.
#pragma once
#include <cstddef>
#include <cstdint>

#include "preload/alloc/sampled_address_set.h"
#include "preload/runtime/config.h"

namespace flightrec {

// Called once by the runtime's init (lifecycle.cc). Before it runs, and after
// it when FLIGHTREC_ALLOC_SAMPLE_BYTES=0, the hooks only forward.
void AllocProfilerInit(const Config& config);

// Whether the program's malloc calls run our hooks (hook_malloc.cc): not when
// another allocator comes first in the lookup order (listed ahead of the
// preload, a sanitizer runtime, an executable's own malloc). Asked once at
// init, on a program thread outside the recorder's own work.
bool MallocReachesAllocHooks();

struct ThreadState;

namespace alloc {

// Live sampled addresses. The free() hook calls g_sampled.MaybeContains()
// inline; everything else goes through the functions below.
extern SampledAddressSet g_sampled;

// The calling thread's countdown expired on an allocation of `size` bytes:
// returns true if that allocation is to be sampled (the caller performs it,
// then calls RecordAllocation with the result). Also handles: first use on a
// thread (seeding), profiler not initialised or off, recorder threads, and
// re-entry from our own sampled path.
bool AllocShouldSample(size_t size);

// Sampled path: capture the caller's stack, push alloc.sample, remember ptr.
void RecordAllocation(void* ptr, size_t size);

// Its push (exposed for the unit tests): one sample with its captured stack
// into ts's ring (ts null: the calling thread's, registered if need be); the
// whole stack the first time ts pushes it, its hash after that
// (preload/alloc/stack_refs.h). False: the ring had no room.
bool PushAllocSample(ThreadState* ts, void* ptr, size_t size, uint64_t sample_bytes, const uint64_t* pcs,
                     uint32_t npcs);

// Free side. RecordFreeIfSampled: removes ptr from the set and pushes
// alloc.free if it was there. Must run before the real free, so the address
// cannot be handed out (and sampled) again while it is still in the set.
void RecordFreeIfSampled(void* ptr);
// For realloc: remove without reporting; then either PushFree (the block
// went away) or ReinsertSampled (the real realloc failed).
bool TakeSampled(void* ptr);
void PushFree(void* ptr, uint64_t time_ns);
void ReinsertSampled(void* ptr);

// The mean sampling interval in force (0 = off), for tests and diagnostics.
uint64_t AllocSampleBytes();

}  // namespace alloc
}  // namespace flightrec
