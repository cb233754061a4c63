// Off-CPU from interposed blocking calls: the fallback when context-switch
// sampling is refused (or with the SIGPROF sampler). sampler/hook_blocking.cc
// times poll/select/epoll/sleeps/condvar/mutex waits on threads where this is
// on; a call that blocked at least FLIGHTREC_OFFCPU_MIN_US records its stack
// (captured in place after the call returns) into the thread's ring.
#pragma once
#include <atomic>
#include <cstdint>

#include "preload/threads/block_notes.h"

namespace flightrec::sampler {

// The per-thread switch and the gate live in the runtime
// (preload/threads/block_notes.h), which the socket hooks read too.
inline bool OffCpuHooksOn() { return BlockNotesOn(); }

// Records one block if it lasted at least g_offcpu_min_ns. `reason` must be
// a string with static storage (e.g. "poll"). Called directly by a hook: the
// stack starts at that hook's frame (this function's own frame is dropped).
// No host malloc, no locks; a full ring counts a drop.
// extra_skip: frames between the hook and this call to drop as well (the
// socket hooks call it from their timed-call helper).
void OffCpuNoteBlock(uint64_t start_ns, uint64_t end_ns, const char* reason, int extra_skip = 0);

void SetThreadOffCpuHooks(bool on);
// Registers the ring record's decoder and OffCpuNoteBlock as the runtime's
// block note.
void RegisterOffCpuDecoding();

// Minimum duration recorded (ns); set once at init.
extern uint64_t g_offcpu_min_ns;

}  // namespace flightrec::sampler
