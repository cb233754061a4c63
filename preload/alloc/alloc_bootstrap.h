// Bootstrap arena: serves the few allocations made while the real malloc
// family is being resolved (dlsym itself may call malloc/calloc), before any
// allocator can be called. A static bump arena: never freed, never reused,
// zero-filled (it lives in .bss and no byte is handed out twice), so calloc
// from it needs no memset.
//
// free/realloc/malloc_usable_size must recognise its pointers and never pass
// them to the real allocator; BootstrapOwns() is one unsigned compare.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flightrec::alloc {

inline constexpr size_t kBootstrapArenaBytes = 64 * 1024;

// The arena itself; exposed only so BootstrapOwns() inlines into the hooks.
extern unsigned char g_bootstrap_arena[kBootstrapArenaBytes];

inline bool BootstrapOwns(const void* p) {
  return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(g_bootstrap_arena) < kBootstrapArenaBytes;
}

// Returns `size` bytes aligned to `alignment` (a power of two, at least 16;
// smaller values are raised to 16), or nullptr when the arena is exhausted or
// the alignment is not a power of two. Thread-safe and lock-free.
void* BootstrapAlloc(size_t size, size_t alignment);

// The size requested for a pointer BootstrapAlloc returned.
size_t BootstrapSize(const void* p);

// Bytes handed out so far (tests, diagnostics).
size_t BootstrapUsed();

}  // namespace flightrec::alloc
