// The recorder's private heap: the mimalloc functions the recorder calls
// (mi_malloc, mi_realloc, mi_free, mi_new_n behind mi_stl_allocator), served
// by Debian's libmimalloc.so.2 loaded with dlopen(RTLD_LOCAL), so none of
// its symbols (operator new/delete, malloc, __libc_malloc, ...) joins the
// program's global scope. Definitions: recorder_heap.cc (the TSan build:
// tsan_recorder_heap.cc).
//
// The heap opens on first use, or explicitly from the constructor; it never
// opens in a secure-execution (setuid/setgid) process, and mimalloc never
// sees the program's MIMALLOC_* variables: its options are ours. Failures
// are answers, never aborts: mi_malloc/mi_realloc return null and mi_new_n
// throws std::bad_alloc (caught where recording starts and in each recorder
// thread: recording stops, the host goes on).
#pragma once

#include <cstddef>
#include <cstdint>

namespace flightrec {

enum class HeapState {
  kClosed,   // not opened yet
  kPrivate,  // our own copy of mimalloc, options set by us
  kShared,   // the program had loaded libmimalloc.so.2 itself: its heap, its options
  kRefused,  // secure-execution process: never opened
  kMissing,  // libmimalloc.so.2 could not be loaded (not installed, no memory)
};

// Opens the heap if it is not yet open; returns the state after the attempt.
// Not for hot paths or signal handlers (it may dlopen).
HeapState RecorderHeapOpen();
HeapState RecorderHeapStateNow();
const char* HeapStateName(HeapState state);

// Hands back to the kernel what the calling thread's part of the heap holds
// free (mimalloc's mi_collect(true): pages emptied since, pages kept for
// reuse, cached segments), at most once per kCollectEveryNs per thread
// (issue #44). mimalloc returns a page only when its last block is freed
// and then keeps it a while for the next allocation of its size; a
// recorder thread works in short bursts, so between bursts those pages stay
// resident, ~0.1 MiB in each PostgreSQL backend. `now_ns` is the caller's
// monotonic clock. Recorder threads only, between their work: never from a
// hook or a signal handler. Does nothing unless the heap is our own copy
// (kPrivate): a program's own mimalloc keeps its own policy.
void RecorderHeapCollect(uint64_t now_ns);
inline constexpr uint64_t kCollectEveryNs = 1'000'000'000;

// Whether this process may open the heap at all: not when `at_secure`
// (getauxval(AT_SECURE)) is set. A function of its input, for the unit test.
bool HeapAllowed(unsigned long at_secure);

// True when `entry` ("NAME=value") is one mimalloc would read as an option:
// mimalloc compares names case-insensitively.
bool IsMimallocVariable(const char* entry);

}  // namespace flightrec
