// Where malloc goes on the recorder's own threads (issue #44).
//
// The libraries our threads call (libdw and libelf above all, zlib,
// libunwind, libcurl) allocate with plain malloc. Through glibc that cost
// the host in two ways: each of our threads got a glibc arena of its own,
// which keeps what libdw freed resident for the process's life; and
// libdw's large blocks (a decompressed debug section: megabytes) were
// mmapped chunks whose free raises glibc's process-wide mmap threshold, so
// the program's own large allocations stopped being mmapped after ours
// were freed. So the malloc family, called on a recorder thread, is served
// by the recorder's private heap instead (recorder_heap.h): a mimalloc heap
// per recorder thread, allocating only inside one reserved range of
// address space, the recorder arena (kRecorderArenaBytes). A block's
// address says who owns it: free, realloc and malloc_usable_size on any
// thread send a pointer inside the arena to mimalloc (one subtraction and
// one compare, InRecorderArena), everything else to the real allocator.
//
// Invariant: every pointer in [arena, arena + size) that the malloc family
// handed out came from mimalloc, and every pointer these functions hand
// out is in the arena (checked on each allocation: anything else is given
// back and the caller falls back to the real allocator). Nothing is routed
// before the arena exists, when the private heap is not ours (kShared:
// the program's mimalloc), or when the reservation failed (RLIMIT_AS).
//
// The recorder's own allocations (mi_malloc, mi_realloc: recorder_heap.cc)
// go to the same per-thread heap on a recorder thread, in our own work on
// a program's thread, and on a program's thread that has such a heap
// already: one mimalloc heap per thread, not two (issue #44). The arena is
// reserved when the private heap opens and is not exclusive, so mimalloc
// takes the segments of its default heaps from it too (a thread's default
// heap holds its arena heap's own struct): all of the recorder's heap lies
// in this one range.
//
// Memory allocated inside glibc itself (strdup, fopen: libc's internal
// malloc) never passes through here and stays glibc's, on both sides.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace flightrec {

inline constexpr size_t kRecorderArenaBytes = 128ull << 20;  // address space only; pages as used

namespace recorder_arena_detail {
extern std::atomic<uintptr_t> g_lo;
extern std::atomic<uintptr_t> g_size;  // 0 until the arena exists
}  // namespace recorder_arena_detail

// Whether p lies in the recorder arena. Any thread, async-signal-safe.
inline bool InRecorderArena(const void* p) {
  const uintptr_t size = recorder_arena_detail::g_size.load(std::memory_order_acquire);
  return reinterpret_cast<uintptr_t>(p) - recorder_arena_detail::g_lo.load(std::memory_order_relaxed) < size;
}

// For the calling recorder thread: a block from the arena, or null (no
// arena, arena full, bad alignment: the caller uses the real allocator).
// Makes the thread's heap on first use. Recorder threads (and our own work
// on a program's thread) only.
void* RecorderThreadMalloc(size_t size);
void* RecorderThreadCalloc(size_t n, size_t size);
void* RecorderThreadAligned(size_t alignment, size_t size);
// Whether the calling thread has its heap in the arena already.
bool RecorderThreadHasHeap();
// mimalloc's realloc (not glibc's: size 0 gives a minimal block) for the
// recorder's own mi_realloc on a recorder thread: p null or any block of the
// private heap, the result from the calling thread's arena heap; null (p
// untouched) when the arena cannot serve.
void* RecorderThreadRealloc(void* p, size_t size);

// For a block in the arena, on any thread (glibc semantics: size 0 frees
// and returns null). On a recorder thread the block stays in the arena; on
// a program thread it moves to the real allocator.
void* RecorderArenaRealloc(void* p, size_t size, bool recorder_thread);
void RecorderArenaFree(void* p);
size_t RecorderArenaUsableSize(const void* p);

// Before a block of the private heap is freed on a recorder thread: gives
// the pages wholly inside a medium-sized block back to the kernel (the .cc
// says why). Never on a program's thread (a system call there is the
// host's time).
void ReleaseFreedBlockPages(void* p);

// The calling thread's arena heap gives back what it holds free (with
// RecorderHeapCollect). Recorder threads only.
void RecorderArenaCollect();

// Called by the private heap before it loads libmimalloc (recorder_heap.cc):
// makes the key whose destructor closes a thread's arena heap as the thread
// exits, before mimalloc's own deletes it. Without it no heap is made in
// the arena (everything goes to the default heap and the real allocator).
void RecorderArenaPrepare();

// Called once by the private heap when it opens (recorder_heap.cc) with
// libmimalloc's handle; reserves the arena then, before any segment of
// ours exists.
void RecorderArenaResolve(void* mimalloc_handle);

}  // namespace flightrec
