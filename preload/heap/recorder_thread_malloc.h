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
// Creates the arena on first use. Recorder threads only.
void* RecorderThreadMalloc(size_t size);
void* RecorderThreadCalloc(size_t n, size_t size);
void* RecorderThreadAligned(size_t alignment, size_t size);

// For a block in the arena, on any thread (glibc semantics: size 0 frees
// and returns null). On a recorder thread the block stays in the arena; on
// a program thread it moves to the real allocator.
void* RecorderArenaRealloc(void* p, size_t size, bool recorder_thread);
void RecorderArenaFree(void* p);
size_t RecorderArenaUsableSize(const void* p);

// The calling thread's arena heap gives back what it holds free (with
// RecorderHeapCollect). Recorder threads only.
void RecorderArenaCollect();

// Called once by the private heap when it opens (recorder_heap.cc) with
// libmimalloc's handle; the arena itself is reserved on first use.
void RecorderArenaResolve(void* mimalloc_handle);

}  // namespace flightrec
