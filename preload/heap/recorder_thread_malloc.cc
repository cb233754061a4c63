// The recorder arena and the recorder threads' malloc (see
// recorder_thread_malloc.h).
#include "preload/heap/recorder_thread_malloc.h"
#include "preload/threads/thread_registry.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include <cstring>

namespace flightrec {
namespace recorder_arena_detail {
std::atomic<uintptr_t> g_lo{0};
std::atomic<uintptr_t> g_size{0};
}  // namespace recorder_arena_detail

namespace {

using recorder_arena_detail::g_lo;
using recorder_arena_detail::g_size;

struct Heap;  // mi_heap_t
using ReserveFn = int (*)(size_t size, bool commit, bool allow_large, bool exclusive, int* arena_id);
using AreaFn = void* (*)(int arena_id, size_t* size);
using HeapNewFn = Heap* (*)(int arena_id);
using HeapMallocFn = void* (*)(Heap*, size_t);
using HeapCallocFn = void* (*)(Heap*, size_t, size_t);
using HeapReallocFn = void* (*)(Heap*, void*, size_t);
using HeapAlignedFn = void* (*)(Heap*, size_t, size_t);
using HeapCollectFn = void (*)(Heap*, bool);
using FreeFn = void (*)(void*);
using UsableFn = size_t (*)(const void*);

// libmimalloc's functions, set once by RecorderArenaResolve (before any
// recorder thread exists) and read without ordering after that.
struct Fns {
  ReserveFn reserve = nullptr;
  AreaFn area = nullptr;
  HeapNewFn heap_new = nullptr;
  HeapMallocFn malloc = nullptr;
  HeapCallocFn calloc = nullptr;
  HeapReallocFn realloc = nullptr;
  HeapAlignedFn aligned = nullptr;
  HeapCollectFn collect = nullptr;
  FreeFn free = nullptr;
  UsableFn usable = nullptr;
};
Fns g_fns;
std::atomic<bool> g_resolved{false};

// The arena: 0 not tried, 1 being reserved, 2 ready, 3 failed for good.
enum : int { kNone, kReserving, kReady, kFailed };
std::atomic<int> g_arena_state{kNone};
int g_arena_id = 0;

__thread Heap* t_heap __attribute__((tls_model("initial-exec"))) = nullptr;
// Set once the thread's exit has begun (its thread-specific data is being
// destroyed): no arena heap from then on. mimalloc deletes every heap a
// thread made when its own destructor runs, and destructors of other keys
// (the program's, ours) may still allocate after it; a heap used then would
// be freed memory. This key's destructor runs first: it was made before
// libmimalloc was loaded, so its index is the lower one, and glibc calls
// the destructors in index order.
__thread bool t_heap_closed __attribute__((tls_model("initial-exec"))) = false;
pthread_key_t g_exit_key;
std::atomic<bool> g_exit_key_made{false};

void CloseThreadsHeap(void*) {
  t_heap = nullptr;
  t_heap_closed = true;
}
// Set while this thread makes its heap: mimalloc's first use on a thread
// registers it with pthread_setspecific, which may calloc (keys past the
// first 32) and so come back here; that allocation goes to the real
// allocator instead of making a second heap.
__thread bool t_making_heap __attribute__((tls_model("initial-exec"))) = false;

bool ArenaReady() {
  int state = g_arena_state.load(std::memory_order_acquire);
  if (state == kReady) return true;
  if (state != kNone || !g_resolved.load(std::memory_order_acquire)) return false;
  // One reserver; a recorder thread that finds another reserving uses the
  // real allocator meanwhile.
  if (!g_arena_state.compare_exchange_strong(state, kReserving, std::memory_order_acq_rel)) return false;
  int id = 0;
  size_t size = 0;
  void* lo = nullptr;
  // Reserved, not committed: mimalloc commits what it uses and decommits
  // what it frees, so only pages in use are resident. Not exclusive: the
  // heaps made in it allocate only here, and mimalloc takes the segments
  // of every other heap of ours from here first too (a thread's default
  // heap, which holds its arena heap's own struct), so all of the
  // recorder's heap lies in this one range.
  if (g_fns.reserve(kRecorderArenaBytes, false, false, false, &id) == 0) lo = g_fns.area(id, &size);
  if (!lo || size == 0) {
    g_arena_state.store(kFailed, std::memory_order_release);
    return false;
  }
  g_arena_id = id;
  g_lo.store(reinterpret_cast<uintptr_t>(lo), std::memory_order_relaxed);
  g_size.store(size, std::memory_order_release);
  g_arena_state.store(kReady, std::memory_order_release);
  return true;
}

Heap* ThisThreadsHeap() {
  if (t_heap) return t_heap;
  if (t_making_heap || t_heap_closed || !g_exit_key_made.load(std::memory_order_acquire) || !ArenaReady())
    return nullptr;
  t_making_heap = true;
  t_heap = g_fns.heap_new(g_arena_id);
  // Non-null, so that the key's destructor runs at this thread's exit.
  if (t_heap) pthread_setspecific(g_exit_key, &t_heap);
  t_making_heap = false;
  return t_heap;
}

// p if it lies in the arena; otherwise p goes back and the answer is null.
// (An exclusive arena's heap never allocates elsewhere: a second line of
// defence for the invariant, not a path taken.)
void* Checked(void* p) {
  if (!p || InRecorderArena(p)) return p;
  g_fns.free(p);
  return nullptr;
}

}  // namespace

void RecorderArenaPrepare() {
  if (g_exit_key_made.load(std::memory_order_acquire)) return;
  if (pthread_key_create(&g_exit_key, CloseThreadsHeap) == 0) g_exit_key_made.store(true, std::memory_order_release);
}

void RecorderArenaResolve(void* handle) {
  if (g_resolved.load(std::memory_order_acquire) || !handle) return;
  Fns f;
  f.reserve = reinterpret_cast<ReserveFn>(dlsym(handle, "mi_reserve_os_memory_ex"));
  f.area = reinterpret_cast<AreaFn>(dlsym(handle, "mi_arena_area"));
  f.heap_new = reinterpret_cast<HeapNewFn>(dlsym(handle, "mi_heap_new_in_arena"));
  f.malloc = reinterpret_cast<HeapMallocFn>(dlsym(handle, "mi_heap_malloc"));
  f.calloc = reinterpret_cast<HeapCallocFn>(dlsym(handle, "mi_heap_calloc"));
  f.realloc = reinterpret_cast<HeapReallocFn>(dlsym(handle, "mi_heap_realloc"));
  f.aligned = reinterpret_cast<HeapAlignedFn>(dlsym(handle, "mi_heap_malloc_aligned"));
  f.collect = reinterpret_cast<HeapCollectFn>(dlsym(handle, "mi_heap_collect"));
  f.free = reinterpret_cast<FreeFn>(dlsym(handle, "mi_free"));
  f.usable = reinterpret_cast<UsableFn>(dlsym(handle, "mi_usable_size"));
  // A mimalloc without arenas (before 2.0.6 / 1.7.6): nothing is routed.
  if (!f.reserve || !f.area || !f.heap_new || !f.malloc || !f.calloc || !f.realloc || !f.aligned || !f.collect ||
      !f.free || !f.usable)
    return;
  g_fns = f;
  g_resolved.store(true, std::memory_order_release);
  (void)ArenaReady();  // before the first segment of ours, so that all come from it
}

void* RecorderThreadMalloc(size_t size) {
  Heap* h = ThisThreadsHeap();
  return h ? Checked(g_fns.malloc(h, size)) : nullptr;
}

void* RecorderThreadCalloc(size_t n, size_t size) {
  Heap* h = ThisThreadsHeap();
  return h ? Checked(g_fns.calloc(h, n, size)) : nullptr;
}

void* RecorderThreadAligned(size_t alignment, size_t size) {
  // mimalloc wants a power of two; glibc's memalign rounds other values up:
  // those stay glibc's.
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return nullptr;
  Heap* h = ThisThreadsHeap();
  return h ? Checked(g_fns.aligned(h, size, alignment)) : nullptr;
}

bool RecorderThreadHasHeap() { return t_heap != nullptr; }

void* RecorderThreadRealloc(void* p, size_t size) {
  // A null answer leaves p as it was (mi_heap_realloc frees it only once
  // the new block exists). The recorder's own blocks never reach the
  // malloc family, so where the new one lies needs no check here.
  Heap* h = ThisThreadsHeap();
  return h ? g_fns.realloc(h, p, size) : nullptr;
}

void* RecorderArenaRealloc(void* p, size_t size, bool recorder_thread) {
  if (size == 0) {
    g_fns.free(p);
    return nullptr;
  }
  if (recorder_thread) {
    if (Heap* h = ThisThreadsHeap()) {
      if (void* q = Checked(g_fns.realloc(h, p, size))) return q;
    }
  }
  // A program thread (libdw memory freed at exit, say), or the arena is
  // full: the block moves to the real allocator.
  void* q = malloc(size);  // the program's malloc, through our hook
  if (!q) return nullptr;  // p untouched, as realloc promises
  const size_t old = g_fns.usable(p);
  memcpy(q, p, old < size ? old : size);
  g_fns.free(p);
  return q;
}

void RecorderArenaFree(void* p) {
  if (IsRecorderThread()) ReleaseFreedBlockPages(p);
  g_fns.free(p);
}

// mimalloc keeps blocks of a medium size class (8-128 KiB) in 512 KiB pages
// shared by several blocks, and a freed block stays resident for as long as
// any other block of its page lives. A buffer that grew by doubling (a
// vector, an event batch's columns, zstd's workspace) leaves its old blocks
// so: 100-200 KiB of a PostgreSQL backend's heap at any time, read page by
// page (issue #44). So the pages wholly inside such a block go back to the
// kernel before it is freed, all but the one holding its first word, which
// mimalloc links its free list through (it reads nothing else of a free
// block, and hands a block out again as uninitialised memory: zero pages
// are as good). Larger blocks have a page of their own, which mimalloc
// decommits itself once free.
void ReleaseFreedBlockPages(void* p) {
  constexpr size_t kMinBytes = 32 << 10, kMaxBytes = 128 << 10;
  if (!p || !g_resolved.load(std::memory_order_acquire)) return;
  const size_t n = g_fns.usable(p);
  if (n < kMinBytes || n > kMaxBytes) return;
  static const uintptr_t page = getauxval(AT_PAGESZ) ? getauxval(AT_PAGESZ) : 4096;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + sizeof(void*) + page - 1) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

size_t RecorderArenaUsableSize(const void* p) { return g_fns.usable(p); }

void RecorderArenaCollect() {
  if (t_heap) g_fns.collect(t_heap, true);
}

}  // namespace flightrec
