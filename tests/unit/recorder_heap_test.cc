// Recorder heap tests: the decisions (secure execution, which variables
// mimalloc would read, address-space room) and the heap itself in this
// process: private, its failures answers rather than aborts.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <mimalloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "format/mi_containers.h"
#include "preload/heap/address_space.h"
#include "preload/heap/recorder_heap.h"
#include "preload/heap/recorder_thread_malloc.h"
#include "preload/threads/thread_registry.h"

using flightrec::AddressSpaceRoomFor;
using flightrec::HeapAllowed;
using flightrec::IsMimallocVariable;
using flightrec::kRecorderAddressSpace;

TEST_CASE("recorder heap: never in a secure-execution process") {
  CHECK(HeapAllowed(0));
  CHECK_FALSE(HeapAllowed(1));
}

TEST_CASE("recorder heap: the variables mimalloc would read, in any case") {
  CHECK(IsMimallocVariable("MIMALLOC_VERBOSE=1"));
  CHECK(IsMimallocVariable("mimalloc_show_stats=1"));
  CHECK(IsMimallocVariable("MiMalloc_Reserve_OS_Memory=1g"));
  CHECK(IsMimallocVariable("MIMALLOC_="));
  CHECK_FALSE(IsMimallocVariable("MIMALLOCX=1"));
  CHECK_FALSE(IsMimallocVariable("MIMALLO"));
  CHECK_FALSE(IsMimallocVariable("XMIMALLOC_VERBOSE=1"));
  CHECK_FALSE(IsMimallocVariable("PATH=/bin"));
  CHECK_FALSE(IsMimallocVariable(nullptr));
}

TEST_CASE("address space: room only with twice the recorder's need left") {
  const uint64_t need = 2 * kRecorderAddressSpace;
  CHECK(AddressSpaceRoomFor(RLIM_INFINITY, 1ull << 40));
  CHECK(AddressSpaceRoomFor(need + (10 << 20), 10 << 20));
  CHECK_FALSE(AddressSpaceRoomFor(need + (10 << 20) - 1, 10 << 20));
  CHECK_FALSE(AddressSpaceRoomFor(40000ull << 10, 5 << 20));  // ulimit -v 40000
  CHECK_FALSE(AddressSpaceRoomFor(100, 200));                 // already over
  CHECK(AddressSpaceRoomFor(2000000ull << 10, 10 << 20));
}

TEST_CASE("recorder heap: private, and failures are answers") {
  void* p = mi_malloc(100);
  REQUIRE(p != nullptr);
  mi_free(p);
  const auto state = flightrec::RecorderHeapStateNow();
  CHECK((state == flightrec::HeapState::kPrivate || state == flightrec::HeapState::kShared));
#if !defined(__SANITIZE_THREAD__)  // TSan's build serves these from TSan's allocator
  // Nothing of it in the global scope (the unit tests do not link mimalloc).
  CHECK(dlsym(RTLD_DEFAULT, "mi_option_set") == nullptr);
  // An impossible request: null, or std::bad_alloc from the STL allocator.
  volatile size_t huge = SIZE_MAX - 4096;  // volatile: no compile-time size warning
  CHECK(mi_malloc(huge) == nullptr);
  flightrec::format::MiVector<uint64_t> v;
  CHECK_THROWS_AS(v.reserve(huge / 16), std::bad_alloc);
  CHECK_THROWS_AS((void)mi_new_n(huge / 2, 4), std::bad_alloc);
#endif
}

#if !defined(__SANITIZE_THREAD__)
TEST_CASE("recorder heap: freed memory goes back to the kernel at once (issue #44)") {
  void* p = mi_malloc(64);
  REQUIRE(p != nullptr);
  mi_free(p);
  if (flightrec::RecorderHeapStateNow() != flightrec::HeapState::kPrivate) return;  // the program's options
  void* handle = dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto version = reinterpret_cast<int (*)()>(dlsym(handle, "mi_version"));
  auto option_get = reinterpret_cast<long (*)(int)>(dlsym(handle, "mi_option_get"));
  REQUIRE(static_cast<bool>(version));
  REQUIRE(static_cast<bool>(option_get));
  const int v = version();
  if (v >= 200 && v < 300) {
    CHECK(option_get(15) == 0);  // decommit_delay (2.0) / purge_delay (2.1+): no delay
    CHECK(option_get(12) == 1);  // abandoned_page_decommit / abandoned_page_purge
  }
  if (v >= 200 && v < 210) {
    CHECK(option_get(11) == 1);  // page_reset
    CHECK(option_get(23) == 0);  // segment_decommit_delay
  }
  dlclose(handle);
}
#endif

#if !defined(__SANITIZE_THREAD__)
namespace {

// Whether the 4 KiB page holding p is resident (an unmapped page is not).
bool Resident(const void* p) {
  unsigned char vec = 0;
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095});
  return mincore(page, 4096, &vec) == 0 && (vec & 1);
}

// Fills most of one small page of a size class on this thread's part of the
// heap, frees it all, and returns a block from its middle (its page holds
// blocks only, no page metadata).
void* FillAndEmptyOnePage() {
  std::vector<void*> blocks;
  for (int i = 0; i < 200; i++) blocks.push_back(mi_malloc(256));
  void* middle = blocks[100];
  for (void* b : blocks) mi_free(b);
  return middle;
}

}  // namespace

TEST_CASE("recorder heap: a recorder thread's emptied pages go back when it collects, once a second (issue #44)") {
  void* p = mi_malloc(64);
  REQUIRE(p != nullptr);
  mi_free(p);
  if (flightrec::RecorderHeapStateNow() != flightrec::HeapState::kPrivate) return;  // the program's mimalloc
  // A thread of its own: its own part of the heap, never collected before.
  std::thread([] {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    // mimalloc keeps the emptied page (the only one of its size class) for
    // the next allocation of that size: resident though nothing is in it.
    void* middle = FillAndEmptyOnePage();
    REQUIRE(Resident(middle));
    flightrec::RecorderHeapCollect(now);
    CHECK_FALSE(Resident(middle));
    // Within the same second a second call does nothing...
    middle = FillAndEmptyOnePage();
    REQUIRE(Resident(middle));
    flightrec::RecorderHeapCollect(now + flightrec::kCollectEveryNs - 1);
    CHECK(Resident(middle));
    // ...and a second later it collects again.
    flightrec::RecorderHeapCollect(now + flightrec::kCollectEveryNs);
    CHECK_FALSE(Resident(middle));
  }).join();
}
#endif

#if !defined(__SANITIZE_THREAD__)
TEST_CASE("recorder heap: a medium block freed on a recorder thread gives its pages back, its page's others kept") {
  void* p = mi_malloc(64);
  REQUIRE(p != nullptr);
  mi_free(p);
  if (flightrec::RecorderHeapStateNow() != flightrec::HeapState::kPrivate) return;  // the program's mimalloc
  std::thread([] {
    flightrec::MarkRecorderThread();
    // Three blocks of one medium size class: one mimalloc page holds them,
    // so the page stays in use while any of them lives.
    constexpr size_t kBytes = 60 << 10;
    unsigned char* b[3];
    for (auto*& x : b) {
      x = static_cast<unsigned char*>(mi_malloc(kBytes));
      REQUIRE(x != nullptr);
      memset(x, 0x7c, kBytes);
    }
    REQUIRE(Resident(b[1] + kBytes / 2));
    mi_free(b[1]);
    // Its interior is gone; the page of its first word (mimalloc's free
    // list link) and its neighbours stay, contents intact.
    CHECK_FALSE(Resident(b[1] + kBytes / 2));
    CHECK(Resident(b[1]));
    CHECK(b[0][kBytes - 1] == 0x7c);
    CHECK(b[2][0] == 0x7c);
    CHECK(b[2][kBytes - 1] == 0x7c);
    // Handed out again, the block is plain usable memory.
    auto* again = static_cast<unsigned char*>(mi_malloc(kBytes));
    REQUIRE(again != nullptr);
    memset(again, 0x11, kBytes);
    CHECK(again[kBytes / 2] == 0x11);
    // A small block is left alone (not worth a system call).
    auto* small = static_cast<unsigned char*>(mi_malloc(2000));
    auto* keep = static_cast<unsigned char*>(mi_malloc(2000));
    memset(small, 1, 2000);
    mi_free(small);
    CHECK(Resident(small + 1000));
    mi_free(keep);
    mi_free(again);
    mi_free(b[0]);
    mi_free(b[2]);
  }).join();
}
#endif

#if !defined(__SANITIZE_THREAD__)
TEST_CASE("recorder arena: a recorder thread's blocks lie in the arena and are served on any thread (issue #44)") {
  void* p = mi_malloc(64);
  REQUIRE(p != nullptr);
  mi_free(p);
  if (flightrec::RecorderHeapStateNow() != flightrec::HeapState::kPrivate) return;  // nothing is routed then
  void* blocks[5] = {};
  std::thread([&] {
    blocks[0] = flightrec::RecorderThreadMalloc(100);
    blocks[1] = flightrec::RecorderThreadMalloc(3 << 20);  // a decompressed debug section's size
    blocks[2] = flightrec::RecorderThreadCalloc(1000, 8);
    blocks[3] = flightrec::RecorderThreadAligned(4096, 100);
    blocks[4] = flightrec::RecorderThreadMalloc(64);
    CHECK(flightrec::RecorderThreadAligned(24, 100) == nullptr);  // not a power of two: the real allocator's
  }).join();
  for (void* b : blocks) {
    REQUIRE(b != nullptr);
    CHECK(flightrec::InRecorderArena(b));
  }
  CHECK(flightrec::RecorderArenaUsableSize(blocks[1]) >= (3u << 20));
  const auto* zeros = static_cast<const unsigned char*>(blocks[2]);
  CHECK(std::all_of(zeros, zeros + 8000, [](unsigned char c) { return c == 0; }));
  CHECK(reinterpret_cast<uintptr_t>(blocks[3]) % 4096 == 0);
  // A block the real allocator made is not the arena's.
  void* glibc_block = malloc(100);
  CHECK_FALSE(flightrec::InRecorderArena(glibc_block));
  free(glibc_block);
  CHECK_FALSE(flightrec::InRecorderArena(nullptr));
  // On a program thread (this one), a realloc moves the block out of the
  // arena, contents kept.
  memset(blocks[0], 0x5a, 100);
  void* moved = flightrec::RecorderArenaRealloc(blocks[0], 200, /*recorder_thread=*/false);
  REQUIRE(moved != nullptr);
  CHECK_FALSE(flightrec::InRecorderArena(moved));
  CHECK(static_cast<unsigned char*>(moved)[99] == 0x5a);
  free(moved);
  // On a recorder thread it stays in the arena; size 0 frees.
  std::thread([&] {
    memset(blocks[4], 0x33, 64);
    void* grown = flightrec::RecorderArenaRealloc(blocks[4], 1 << 20, /*recorder_thread=*/true);
    REQUIRE(grown != nullptr);
    CHECK(flightrec::InRecorderArena(grown));
    CHECK(static_cast<unsigned char*>(grown)[63] == 0x33);
    CHECK(flightrec::RecorderArenaRealloc(grown, 0, true) == nullptr);
  }).join();
  // Freed on another thread than the one that allocated them.
  for (int i = 1; i < 4; i++) flightrec::RecorderArenaFree(blocks[i]);
}
#endif

TEST_CASE("address space: a set RLIMIT_AS or RLIMIT_DATA charges every mapping") {
  // In a child, so the limits stay the test process's own.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    rlimit lim{};
    getrlimit(RLIMIT_DATA, &lim);
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, rlim_t{64} << 30);
    int ok = setrlimit(RLIMIT_DATA, &lim) == 0 && flightrec::UnwrittenMappingsAreCharged();
    lim.rlim_cur = RLIM_INFINITY;
    if (lim.rlim_max == RLIM_INFINITY) ok = ok && setrlimit(RLIMIT_DATA, &lim) == 0;
    getrlimit(RLIMIT_AS, &lim);
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, rlim_t{64} << 30);
    ok = ok && setrlimit(RLIMIT_AS, &lim) == 0 && flightrec::UnwrittenMappingsAreCharged();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
