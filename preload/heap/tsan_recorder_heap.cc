// The recorder's private heap in the TSan build (make check-preload-tsan):
// the mimalloc functions we call, served by TSan's allocator. Empty in every
// other build (recorder_heap.cc loads libmimalloc.so.2 there).
//
// mimalloc is not instrumented, so TSan cannot see it hand a block freed on
// one thread to another thread: every such reuse looked like a race (an
// Orphan freed by the sampler thread and taken again by an exiting thread in
// SaveAndClose; a vector buffer of the sample queue reused by the segment
// writer). TSan's allocator tells TSan about each reuse. There is no
// recursion to fear: with libtsan first in LD_PRELOAD, malloc is TSan's and
// our malloc hooks never run.
#if defined(__SANITIZE_THREAD__)
#include <mimalloc.h>
#include <sys/auxv.h>

#include <cstdlib>
#include <new>

#include "preload/heap/recorder_heap.h"

namespace flightrec {
// Nothing to load: TSan's allocator is always there.
HeapState RecorderHeapOpen() { return HeapAllowed(getauxval(AT_SECURE)) ? HeapState::kPrivate : HeapState::kRefused; }
HeapState RecorderHeapStateNow() { return RecorderHeapOpen(); }
void RecorderHeapCollect(uint64_t) {}  // TSan's allocator keeps its own policy
}  // namespace flightrec

extern "C" {

void* mi_malloc(size_t size) noexcept { return malloc(size); }

void* mi_realloc(void* p, size_t size) noexcept { return realloc(p, size); }

void mi_free(void* p) noexcept { free(p); }

// mi_stl_allocator::allocate: throws like operator new.
void* mi_new_n(size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) throw std::bad_alloc();
  void* p = malloc(bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // extern "C"
#endif
