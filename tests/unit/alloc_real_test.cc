// Unit tests for real-allocator resolution (preload/alloc/alloc_real.h): every
// pointer ends up callable, consistent with one allocator, and correct.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "preload/alloc/alloc_real.h"

using namespace flightrec::alloc;

TEST_CASE("alloc_real: resolves the whole family from one allocator and it works") {
  REQUIRE(ResolveRealAllocator());
  CHECK(RealAllocatorResolved());
  CHECK(std::string(RealAllocatorObject()).size() > 0);

  void* p = RealMalloc(100);
  REQUIRE(p);
  CHECK(RealUsableSize(p) >= 100);
  memset(p, 1, 100);
  p = RealRealloc(p, 5000);
  REQUIRE(p);
  CHECK(static_cast<unsigned char*>(p)[99] == 1);
  RealFree(p);

  auto* z = static_cast<unsigned char*>(RealCalloc(1000, 3));
  REQUIRE(z);
  for (int i = 0; i < 3000; ++i) REQUIRE(z[i] == 0);
  RealFree(z);

  void* a = nullptr;
  CHECK(RealPosixMemalign(&a, 256, 1000) == 0);
  REQUIRE(a);
  CHECK(reinterpret_cast<uintptr_t>(a) % 256 == 0);
  RealFree(a);
  void* b = RealAlignedAlloc(4096, 8192);
  REQUIRE(b);
  CHECK(reinterpret_cast<uintptr_t>(b) % 4096 == 0);
  RealFree(b);
  void* c = RealMemalign(64, 10);
  REQUIRE(c);
  CHECK(reinterpret_cast<uintptr_t>(c) % 64 == 0);
  RealFree(c);
}
