// malloc-family interposers: malloc, free, calloc, realloc, reallocarray,
// posix_memalign, aligned_alloc, memalign, valloc, pvalloc,
// malloc_usable_size. (cfree is gone from glibc; not provided.) C++ operator
// new/delete reach us through malloc/free.
//
// Unsampled path, the one that matters for overhead: subtract the size from
// the thread's countdown (initial-exec TLS) and tail-call the real function.
// free() adds one bootstrap-range compare and, once anything sampled is live,
// one byte load from the sampled set's home-count array. Everything else is
// behind __builtin_expect in noinline functions.
//
// glibc semantics kept: free(NULL) is a no-op, realloc(NULL, n) is malloc(n),
// realloc(p, 0) is whatever the allocator behind us does (glibc: free, NULL),
// calloc and reallocarray overflow fail with ENOMEM and NULL.
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "preload/alloc/alloc_bootstrap.h"
#include "preload/alloc/alloc_profiler.h"
#include "preload/alloc/alloc_real.h"
#include "preload/alloc/alloc_sampler.h"
#include "preload/heap/recorder_thread_malloc.h"
#include "preload/runtime/clock.h"
#include "preload/threads/thread_registry.h"

// Every function of this file lies in one section, so the allocation
// profiler can tell which frame of a sampled stack called malloc & co.
// (alloc_profiler.cc, AskedForByUs).
#define HOOK_TEXT __attribute__((section("flightrec_alloc_hooks")))
#define MALLOC_HOOK extern "C" __attribute__((visibility("default"))) HOOK_TEXT

// A call through the global lookup goes where the program's calls go,
// through the executable's own PLT entry when it takes malloc's address (a
// non-PIE python3 does: dlsym's answer is then the executable, whatever
// comes after it). Every pass through our malloc moves this thread's
// countdown (subtracted, or reset when it expires), so an unchanged one says
// another malloc served the call.
bool flightrec::MallocReachesAllocHooks() {
  auto global = reinterpret_cast<void* (*)(size_t)>(dlsym(RTLD_DEFAULT, "malloc"));
  if (!global) return true;
  const int64_t before = flightrec::alloc::t_alloc.countdown;
  void* probe = global(64);
  const bool reached = flightrec::alloc::t_alloc.countdown != before;
  free(probe);  // the same lookup's free: ours forwards, another allocator's takes its own block
  return reached;
}

using namespace flightrec::alloc;

namespace {

inline bool Expired(size_t size) { return AllocCountdownExpired(&t_alloc.countdown, size); }

// A recorder thread's allocations go to the recorder arena
// (recorder_thread_malloc.h). Its countdown stays expired (AllocShouldSample
// keeps it so), so they all reach the slow paths below, which ask this
// first: the program's threads never pay for the question.
inline bool RecorderThread() { return __builtin_expect(flightrec::IsRecorderThread(), 0); }

size_t PageSize() {
  static size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

__attribute__((noinline)) HOOK_TEXT void* MallocSlow(size_t size) {
  if (RecorderThread()) {
    if (void* p = flightrec::RecorderThreadMalloc(size)) return p;
  }
  const bool sample = AllocShouldSample(size);
  void* p = RealMalloc(size);
  if (sample && p) RecordAllocation(p, size);
  return p;
}

inline void* MallocImpl(size_t size) {
  if (__builtin_expect(!Expired(size), 1)) return RealMalloc(size);
  return MallocSlow(size);
}

__attribute__((noinline)) HOOK_TEXT void* CallocSlow(size_t n, size_t m, size_t bytes) {
  if (RecorderThread()) {
    if (void* p = flightrec::RecorderThreadCalloc(n, m)) return p;
  }
  const bool sample = AllocShouldSample(bytes);
  void* p = RealCalloc(n, m);
  if (sample && p) RecordAllocation(p, bytes);
  return p;
}

// A block from the bootstrap arena is never given to the real allocator:
// copy it into a real block (the arena copy is simply abandoned).
__attribute__((noinline)) HOOK_TEXT void* ReallocBootstrap(void* p, size_t size) {
  if (size == 0) return nullptr;  // "free" it, like glibc's realloc(p, 0)
  void* q = MallocImpl(size);
  if (q) {
    const size_t old = BootstrapSize(p);
    memcpy(q, p, old < size ? old : size);
  }
  return q;
}

__attribute__((noinline)) HOOK_TEXT void* ReallocSampledOrSlow(void* p, size_t size, bool expired) {
  // A recorder thread's realloc of a block the real allocator gave it (before
  // the arena existed) stays with the real allocator: nothing to route.
  bool was_sampled = false;
  uint64_t freed_at = 0;
  if (g_sampled.MaybeContains(reinterpret_cast<uintptr_t>(p)) && TakeSampled(p)) {
    was_sampled = true;
    // Timed before the real realloc: once it returns, another thread may get
    // (and sample) this address, and its sample must sort after our free.
    freed_at = flightrec::MonotonicNs();
  }
  const bool sample = expired && AllocShouldSample(size);
  void* q = RealRealloc(p, size);
  if (was_sampled) {
    if (q == nullptr && size != 0) ReinsertSampled(p);  // failed: p is untouched and still live
    else PushFree(p, freed_at);
  }
  if (sample && q) RecordAllocation(q, size);
  return q;
}

// A block of the recorder arena, on any thread.
__attribute__((noinline)) HOOK_TEXT void* ReallocArena(void* p, size_t size) {
  return flightrec::RecorderArenaRealloc(p, size, flightrec::IsRecorderThread());
}

inline void* ReallocImpl(void* p, size_t size) {
  if (p == nullptr) return MallocImpl(size);
  if (__builtin_expect(BootstrapOwns(p), 0)) return ReallocBootstrap(p, size);
  if (__builtin_expect(flightrec::InRecorderArena(p), 0)) return ReallocArena(p, size);
  const bool expired = Expired(size);
  if (__builtin_expect(!expired && !g_sampled.MaybeContains(reinterpret_cast<uintptr_t>(p)), 1))
    return RealRealloc(p, size);
  return ReallocSampledOrSlow(p, size, expired);
}

// memalign, aligned_alloc, valloc, pvalloc: same shape, different callee.
template <void* (*Real)(size_t, size_t)>
__attribute__((noinline)) HOOK_TEXT void* AlignedSlow(size_t alignment, size_t size) {
  if (RecorderThread()) {
    if (void* p = flightrec::RecorderThreadAligned(alignment, size)) return p;
  }
  const bool sample = AllocShouldSample(size);
  void* p = Real(alignment, size);
  if (sample && p) RecordAllocation(p, size);
  return p;
}

template <void* (*Real)(size_t, size_t)>
inline void* AlignedImpl(size_t alignment, size_t size) {
  if (__builtin_expect(!Expired(size), 1)) return Real(alignment, size);
  return AlignedSlow<Real>(alignment, size);
}

__attribute__((noinline)) HOOK_TEXT int PosixMemalignSlow(void** out, size_t alignment, size_t size) {
  // (posix_memalign's own rule: a power of two times sizeof(void*); else EINVAL from the real one.)
  if (RecorderThread() && alignment % sizeof(void*) == 0) {
    if (void* p = flightrec::RecorderThreadAligned(alignment, size)) {
      *out = p;
      return 0;
    }
  }
  const bool sample = AllocShouldSample(size);
  const int rc = RealPosixMemalign(out, alignment, size);
  if (sample && rc == 0 && *out) RecordAllocation(*out, size);
  return rc;
}

__attribute__((noinline)) HOOK_TEXT void FreeSampled(void* p) { RecordFreeIfSampled(p); }

}  // namespace

MALLOC_HOOK void* malloc(size_t size) { return MallocImpl(size); }

MALLOC_HOOK void free(void* p) {
  if (__builtin_expect(BootstrapOwns(p), 0)) return;  // arena blocks are never released
  if (__builtin_expect(flightrec::InRecorderArena(p), 0)) return flightrec::RecorderArenaFree(p);
  if (__builtin_expect(g_sampled.MaybeContains(reinterpret_cast<uintptr_t>(p)), 0)) FreeSampled(p);
  RealFree(p);
}

MALLOC_HOOK void* calloc(size_t n, size_t m) {
  size_t bytes;
  // On overflow the real calloc fails with its own errno; nothing to count.
  if (__builtin_mul_overflow(n, m, &bytes)) return RealCalloc(n, m);
  if (__builtin_expect(!Expired(bytes), 1)) return RealCalloc(n, m);
  return CallocSlow(n, m, bytes);
}

MALLOC_HOOK void* realloc(void* p, size_t size) { return ReallocImpl(p, size); }

MALLOC_HOOK void* reallocarray(void* p, size_t n, size_t m) {
  size_t bytes;
  if (__builtin_mul_overflow(n, m, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return ReallocImpl(p, bytes);
}

MALLOC_HOOK int posix_memalign(void** out, size_t alignment, size_t size) {
  if (__builtin_expect(!Expired(size), 1)) return RealPosixMemalign(out, alignment, size);
  return PosixMemalignSlow(out, alignment, size);
}

MALLOC_HOOK void* aligned_alloc(size_t alignment, size_t size) {
  return AlignedImpl<RealAlignedAlloc>(alignment, size);
}

MALLOC_HOOK void* memalign(size_t alignment, size_t size) { return AlignedImpl<RealMemalign>(alignment, size); }

MALLOC_HOOK void* valloc(size_t size) { return AlignedImpl<RealMemalign>(PageSize(), size); }

MALLOC_HOOK void* pvalloc(size_t size) {
  const size_t page = PageSize();
  size_t rounded;
  if (__builtin_add_overflow(size, page - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  rounded &= ~(page - 1);
  if (rounded == 0) rounded = page;
  return AlignedImpl<RealMemalign>(page, rounded);
}

MALLOC_HOOK size_t malloc_usable_size(void* p) {
  if (p == nullptr) return 0;
  if (__builtin_expect(BootstrapOwns(p), 0)) return BootstrapSize(p);
  if (__builtin_expect(flightrec::InRecorderArena(p), 0)) return flightrec::RecorderArenaUsableSize(p);
  return RealUsableSize(p);
}
