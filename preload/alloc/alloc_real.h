// Real allocator: the next implementation of the malloc family behind our
// hooks (dlsym(RTLD_NEXT, ...): glibc, or a jemalloc/tcmalloc/mimalloc
// preloaded after us), resolved once.
//
// Before resolution every pointer below is a stub that resolves on first use,
// so hooks call through them unconditionally. dlsym may itself allocate: while
// a thread is resolving, the stubs serve malloc/calloc/aligned requests from
// the bootstrap arena (alloc_bootstrap.h) instead of recursing.
//
// Consistency: all functions come from the object that provides the next
// `malloc`. A function that object does not define (e.g. pvalloc on an
// allocator without it, where RTLD_NEXT would find glibc's copy, which would
// allocate from a different heap than the one free() returns to) is emulated
// on top of that object's own functions.
#pragma once
#include <atomic>
#include <cstddef>

namespace flightrec::alloc {

using MallocFn = void* (*)(size_t);
using FreeFn = void (*)(void*);
using CallocFn = void* (*)(size_t, size_t);
using ReallocFn = void* (*)(void*, size_t);
using PosixMemalignFn = int (*)(void**, size_t, size_t);
using AlignedFn = void* (*)(size_t, size_t);  // aligned_alloc and memalign
using UsableSizeFn = size_t (*)(void*);

// Written by ResolveRealAllocator, read by every hook (relaxed: a plain load
// on x86). Each pointer is at every moment either its stub or the final
// function, and both are correct to call.
struct RealAllocFns {
  std::atomic<MallocFn> malloc;
  std::atomic<FreeFn> free;
  std::atomic<CallocFn> calloc;
  std::atomic<ReallocFn> realloc;
  std::atomic<PosixMemalignFn> posix_memalign;
  std::atomic<AlignedFn> aligned_alloc;
  std::atomic<AlignedFn> memalign;
  std::atomic<UsableSizeFn> malloc_usable_size;
};
extern RealAllocFns g_real;

inline void* RealMalloc(size_t n) { return g_real.malloc.load(std::memory_order_relaxed)(n); }
inline void RealFree(void* p) { g_real.free.load(std::memory_order_relaxed)(p); }
inline void* RealCalloc(size_t n, size_t m) { return g_real.calloc.load(std::memory_order_relaxed)(n, m); }
inline void* RealRealloc(void* p, size_t n) { return g_real.realloc.load(std::memory_order_relaxed)(p, n); }
inline int RealPosixMemalign(void** out, size_t a, size_t n) {
  return g_real.posix_memalign.load(std::memory_order_relaxed)(out, a, n);
}
inline void* RealAlignedAlloc(size_t a, size_t n) { return g_real.aligned_alloc.load(std::memory_order_relaxed)(a, n); }
inline void* RealMemalign(size_t a, size_t n) { return g_real.memalign.load(std::memory_order_relaxed)(a, n); }
inline size_t RealUsableSize(void* p) { return g_real.malloc_usable_size.load(std::memory_order_relaxed)(p); }

// Resolves once. Returns false if called re-entrantly by the thread that is
// resolving right now (the caller must then use the bootstrap arena).
bool ResolveRealAllocator();
bool RealAllocatorResolved();

// Path of the object the next malloc lives in ("" before resolution or if
// unknown), for the one log line that says where host allocations go.
const char* RealAllocatorObject();
// Names of functions emulated because the malloc object lacks them ("" if none).
const char* RealAllocatorEmulated();

}  // namespace flightrec::alloc
