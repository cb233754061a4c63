// Real allocator resolution (see alloc_real.h).
#include "preload/alloc/alloc_real.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "preload/alloc/alloc_bootstrap.h"

namespace flightrec::alloc {
namespace {

// 1 while this thread is inside Resolve: dlsym's own allocations must go to
// the bootstrap arena.
__thread int t_resolving __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<bool> g_resolved{false};

char g_object[256];
char g_emulated[128];

// ---- stubs: resolve on first use, then call through ---------------------
void* StubMalloc(size_t n) {
  if (!ResolveRealAllocator()) return BootstrapAlloc(n, 16);
  return RealMalloc(n);
}
void StubFree(void* p) {
  if (BootstrapOwns(p)) return;
  if (ResolveRealAllocator()) RealFree(p);
}
void* StubCalloc(size_t n, size_t m) {
  if (!ResolveRealAllocator()) {
    size_t bytes;
    if (__builtin_mul_overflow(n, m, &bytes)) return nullptr;
    return BootstrapAlloc(bytes, 16);  // arena memory is still zero
  }
  return RealCalloc(n, m);
}
void* StubRealloc(void* p, size_t n) {
  if (!ResolveRealAllocator()) {
    void* q = BootstrapAlloc(n, 16);
    if (q && p) memcpy(q, p, BootstrapOwns(p) ? (BootstrapSize(p) < n ? BootstrapSize(p) : n) : 0);
    return q;
  }
  return RealRealloc(p, n);
}
int StubPosixMemalign(void** out, size_t a, size_t n) {
  if (!ResolveRealAllocator()) {
    void* p = BootstrapAlloc(n, a);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
  }
  return RealPosixMemalign(out, a, n);
}
void* StubAlignedAlloc(size_t a, size_t n) {
  if (!ResolveRealAllocator()) return BootstrapAlloc(n, a);
  return RealAlignedAlloc(a, n);
}
void* StubMemalign(size_t a, size_t n) {
  if (!ResolveRealAllocator()) return BootstrapAlloc(n, a);
  return RealMemalign(a, n);
}
size_t StubUsableSize(void* p) {
  if (!p) return 0;
  if (BootstrapOwns(p)) return BootstrapSize(p);
  if (!ResolveRealAllocator()) return 0;
  return RealUsableSize(p);
}

// ---- emulations on top of the malloc object's own functions --------------
// Used only when the object behind us lacks the function (see alloc_real.h).
void* (*g_base_malloc)(size_t);
int (*g_base_posix_memalign)(void**, size_t, size_t);
void* (*g_base_memalign)(size_t, size_t);

void* EmuCalloc(size_t n, size_t m) {
  size_t bytes;
  if (__builtin_mul_overflow(n, m, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  void* p = g_base_malloc(bytes);
  if (p) memset(p, 0, bytes);
  return p;
}
int EmuPosixMemalign(void** out, size_t a, size_t n) {
  if (a < sizeof(void*) || (a & (a - 1)) != 0) return EINVAL;
  void* p = g_base_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* EmuMemalign(size_t a, size_t n) {
  if (a < sizeof(void*)) a = sizeof(void*);
  if ((a & (a - 1)) != 0) {  // glibc rounds a bad alignment up to a power of two
    size_t p2 = sizeof(void*);
    while (p2 < a) p2 <<= 1;
    a = p2;
  }
  void* p = nullptr;
  const int rc = g_base_posix_memalign(&p, a, n);
  if (rc != 0) {
    errno = rc;
    return nullptr;
  }
  return p;
}
void* EmuAlignedAlloc(size_t a, size_t n) {
  if (g_base_memalign) return g_base_memalign(a, n);
  return EmuMemalign(a, n);
}
size_t EmuUsableSize(void*) { return 0; }  // unknown: "no spare bytes" is always safe
// Last resorts for an allocator that has neither memalign nor posix_memalign
// (or no realloc): fail cleanly rather than mix heaps.
void* NoRealloc(void*, size_t) {
  errno = ENOMEM;
  return nullptr;
}
int NoPosixMemalign(void**, size_t, size_t) { return ENOMEM; }
void* NoAligned(size_t, size_t) {
  errno = ENOMEM;
  return nullptr;
}

// The object that holds malloc: where it is loaded (dladdr's dli_fbase, its
// ELF header) and the span of its PT_LOAD segments. Membership is then a
// comparison: dladdr for each of the six other functions scanned libc's
// whole symbol table each time (~40 us of every process's first malloc).
struct MallocObject {
  const void* base = nullptr;
  uintptr_t lo = 0, hi = 0;  // [lo, hi) of its segments; hi == 0: unknown, ask dladdr

  bool Holds(void* fn) const {
    if (hi) return reinterpret_cast<uintptr_t>(fn) >= lo && reinterpret_cast<uintptr_t>(fn) < hi;
    Dl_info info;
    return dladdr(fn, &info) != 0 && info.dli_fbase == base;
  }
};

// Fills *o from the object's own program headers (mapped with its first
// segment, which starts at the ELF header); leaves hi 0 if they do not look
// like an ELF object's.
void SpanOf(const void* base, MallocObject* o) {
  o->base = base;
  const auto* eh = static_cast<const ElfW(Ehdr)*>(base);
  if (!base || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_phentsize != sizeof(ElfW(Phdr))) return;
  const auto* ph = reinterpret_cast<const ElfW(Phdr)*>(static_cast<const char*>(base) + eh->e_phoff);
  uintptr_t vlo = UINTPTR_MAX, vhi = 0;
  for (int i = 0; i < eh->e_phnum; i++) {
    if (ph[i].p_type != PT_LOAD) continue;
    vlo = ph[i].p_vaddr < vlo ? ph[i].p_vaddr : vlo;
    vhi = ph[i].p_vaddr + ph[i].p_memsz > vhi ? ph[i].p_vaddr + ph[i].p_memsz : vhi;
  }
  if (vhi <= vlo) return;
  // The header is at the page start of the lowest segment: the load bias.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t bias = reinterpret_cast<uintptr_t>(base) - (vlo & ~(page - 1));
  o->lo = bias + vlo;
  o->hi = bias + vhi;
}

void AppendName(const char* name) {
  const size_t used = strlen(g_emulated);
  if (used + strlen(name) + 2 >= sizeof(g_emulated)) return;
  if (used) strcat(g_emulated, " ");
  strcat(g_emulated, name);
}

// Looks `name` up behind us; keeps it only if it lives in the malloc object.
template <typename Fn>
Fn Next(const char* name, const MallocObject& malloc_object) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) return nullptr;
  if (malloc_object.base && !malloc_object.Holds(f)) return nullptr;
  return reinterpret_cast<Fn>(f);
}

}  // namespace

RealAllocFns g_real = {{StubMalloc},        {StubFree},         {StubCalloc},   {StubRealloc},
                       {StubPosixMemalign}, {StubAlignedAlloc}, {StubMemalign}, {StubUsableSize}};

bool RealAllocatorResolved() { return g_resolved.load(std::memory_order_acquire); }
const char* RealAllocatorObject() { return g_object; }
const char* RealAllocatorEmulated() { return g_emulated; }

bool ResolveRealAllocator() {
  if (g_resolved.load(std::memory_order_acquire)) return true;
  if (t_resolving) return false;
  // Several threads may resolve at once; each computes the same answer and
  // the stores are idempotent, so no lock is needed (and none may be taken:
  // it could be held across fork or by a thread interrupted by a signal).
  t_resolving = 1;
  auto next_malloc = reinterpret_cast<MallocFn>(dlsym(RTLD_NEXT, "malloc"));
  auto next_free = reinterpret_cast<FreeFn>(dlsym(RTLD_NEXT, "free"));
  if (!next_malloc || !next_free) {
    // No allocator behind us (cannot happen in a process linked against
    // libc): keep serving the arena rather than recursing into ourselves.
    t_resolving = 0;
    return false;
  }
  Dl_info info;
  MallocObject base;
  if (dladdr(reinterpret_cast<void*>(next_malloc), &info) != 0) {
    SpanOf(info.dli_fbase, &base);
    if (info.dli_fname) strncpy(g_object, info.dli_fname, sizeof(g_object) - 1);
  }
  g_base_malloc = next_malloc;
  auto calloc_fn = Next<CallocFn>("calloc", base);
  auto realloc_fn = Next<ReallocFn>("realloc", base);
  auto pm_fn = Next<PosixMemalignFn>("posix_memalign", base);
  auto aa_fn = Next<AlignedFn>("aligned_alloc", base);
  auto ma_fn = Next<AlignedFn>("memalign", base);
  auto us_fn = Next<UsableSizeFn>("malloc_usable_size", base);
  g_base_posix_memalign = pm_fn;
  g_base_memalign = ma_fn;
  g_emulated[0] = '\0';
  if (!calloc_fn) {
    calloc_fn = EmuCalloc;
    AppendName("calloc");
  }
  if (!realloc_fn) {
    realloc_fn = NoRealloc;
    AppendName("realloc");
  }
  if (!pm_fn) {
    pm_fn = ma_fn ? EmuPosixMemalign : NoPosixMemalign;
    AppendName("posix_memalign");
  }
  if (!ma_fn) {
    ma_fn = g_base_posix_memalign ? EmuMemalign : NoAligned;
    AppendName("memalign");
  }
  if (!aa_fn) {
    aa_fn = (g_base_memalign || g_base_posix_memalign) ? EmuAlignedAlloc : NoAligned;
    AppendName("aligned_alloc");
  }
  if (!us_fn) {
    us_fn = EmuUsableSize;
    AppendName("malloc_usable_size");
  }

  constexpr auto kRel = std::memory_order_relaxed;
  g_real.calloc.store(calloc_fn, kRel);
  g_real.realloc.store(realloc_fn, kRel);
  g_real.posix_memalign.store(pm_fn, kRel);
  g_real.aligned_alloc.store(aa_fn, kRel);
  g_real.memalign.store(ma_fn, kRel);
  g_real.malloc_usable_size.store(us_fn, kRel);
  g_real.free.store(next_free, kRel);
  g_real.malloc.store(next_malloc, kRel);
  t_resolving = 0;
  g_resolved.store(true, std::memory_order_release);
  return true;
}

}  // namespace flightrec::alloc
