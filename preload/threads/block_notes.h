// Blocking calls the hooks saw, offered to whoever records off-CPU time from
// them. The socket hooks (preload/sockets/) time their calls anyway; when a
// call blocked long enough and this thread's off-CPU time comes from hooks
// (the SIGPROF sampler, or perf without context-switch records), they hand
// it on here. The sampler registers the note function
// (sampler/offcpu_blocking.h), so the runtime never includes the sampler.
//
// Hot path: BlockNotesOn() is one TLS load in the common case; NoteBlock is
// inlined into the hook so the note function's caller is the hook itself (the
// stack it captures starts there).
#pragma once
#include <atomic>
#include <cstdint>

#include "preload/stacks/local_stack.h"

namespace flightrec {

// Per thread: true when this thread's off-CPU time comes from the hooks.
extern __thread bool t_block_notes __attribute__((tls_model("initial-exec")));
// Process-wide: set when off-CPU moved to perf's context switches after
// threads were started with the hooks on.
extern std::atomic<bool> g_block_notes_retired;

// `start_ns`..`end_ns` blocked in `reason` (static storage); `extra_skip`
// frames between the hook and the call to drop from the captured stack.
using BlockNoteFn = void (*)(uint64_t start_ns, uint64_t end_ns, const char* reason, int extra_skip);
extern std::atomic<BlockNoteFn> g_block_note;

// Once, at init, before any thread turns notes on.
inline void RegisterBlockNote(BlockNoteFn fn) { g_block_note.store(fn, std::memory_order_release); }

// Off inside a stack capture: a lock taken by the unwinder must not be timed
// (the capture it would trigger re-enters the unwinder while it holds it).
inline bool BlockNotesOn() {
  return t_block_notes && !stacks::t_in_local_capture && !g_block_notes_retired.load(std::memory_order_relaxed);
}

__attribute__((always_inline)) inline void NoteBlock(uint64_t start_ns, uint64_t end_ns, const char* reason,
                                                     int extra_skip = 0) {
  if (BlockNoteFn fn = g_block_note.load(std::memory_order_acquire)) fn(start_ns, end_ns, reason, extra_skip);
}

}  // namespace flightrec
