// Bootstrap arena (see alloc_bootstrap.h).
//
// Layout: each block is preceded by a 16-byte header holding its requested
// size; the header sits immediately before the returned (aligned) pointer.
// Invariant: g_used only grows, so a block is never handed out twice and the
// bytes of every block are still zero from .bss when it is handed out.
#include "preload/alloc/alloc_bootstrap.h"

#include <atomic>

namespace flightrec::alloc {

alignas(64) unsigned char g_bootstrap_arena[kBootstrapArenaBytes];

namespace {

constexpr size_t kHeader = 16;
std::atomic<size_t> g_used{0};

}  // namespace

void* BootstrapAlloc(size_t size, size_t alignment) {
  if (alignment < kHeader) alignment = kHeader;
  if ((alignment & (alignment - 1)) != 0) return nullptr;
  if (size > kBootstrapArenaBytes || alignment > kBootstrapArenaBytes / 4) return nullptr;
  const uintptr_t base = reinterpret_cast<uintptr_t>(g_bootstrap_arena);
  size_t used = g_used.load(std::memory_order_relaxed);
  for (;;) {
    const uintptr_t user = (base + used + kHeader + alignment - 1) & ~(alignment - 1);
    const size_t end = (user - base) + ((size + kHeader - 1) & ~(kHeader - 1));
    if (end > kBootstrapArenaBytes) return nullptr;
    if (g_used.compare_exchange_weak(used, end, std::memory_order_relaxed)) {
      *reinterpret_cast<size_t*>(user - kHeader) = size;
      return reinterpret_cast<void*>(user);
    }
  }
}

size_t BootstrapSize(const void* p) {
  return *reinterpret_cast<const size_t*>(reinterpret_cast<uintptr_t>(p) - kHeader);
}

size_t BootstrapUsed() { return g_used.load(std::memory_order_relaxed); }

}  // namespace flightrec::alloc
