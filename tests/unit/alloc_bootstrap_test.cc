// Unit tests for the bootstrap arena (preload/alloc/alloc_bootstrap.h). In the unit
// test binary no hook uses the arena, so exhausting it here is harmless.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>

#include "preload/alloc/alloc_bootstrap.h"

using namespace flightrec::alloc;

TEST_CASE("alloc_bootstrap: aligned, zeroed, owned, sized, never overlapping; then exhausted") {
  int stack_var = 0;
  CHECK_FALSE(BootstrapOwns(&stack_var));
  CHECK_FALSE(BootstrapOwns(nullptr));

  void* a = BootstrapAlloc(24, 16);
  void* b = BootstrapAlloc(100, 64);
  void* c = BootstrapAlloc(0, 8);  // alignment raised to 16
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(reinterpret_cast<uintptr_t>(a) % 16 == 0);
  CHECK(reinterpret_cast<uintptr_t>(b) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(c) % 16 == 0);
  CHECK(BootstrapOwns(a));
  CHECK(BootstrapOwns(b));
  CHECK(BootstrapSize(a) == 24);
  CHECK(BootstrapSize(b) == 100);
  CHECK(BootstrapSize(c) == 0);
  // Zero-filled (calloc relies on it) and disjoint.
  const unsigned char* pb = static_cast<unsigned char*>(b);
  for (int i = 0; i < 100; ++i) REQUIRE(pb[i] == 0);
  memset(a, 0xAA, 24);
  memset(b, 0xBB, 100);
  CHECK(BootstrapSize(b) == 100);  // a's writes did not reach b's header
  CHECK(static_cast<unsigned char*>(a)[23] == 0xAA);
  CHECK(c != a);
  CHECK(c != b);

  CHECK(BootstrapAlloc(16, 48) == nullptr);  // not a power of two
  CHECK(BootstrapAlloc(kBootstrapArenaBytes + 1, 16) == nullptr);

  // Exhaustion returns null, never memory outside the arena.
  int blocks = 0;
  while (void* p = BootstrapAlloc(1000, 16)) {
    REQUIRE(BootstrapOwns(p));
    REQUIRE(BootstrapOwns(static_cast<char*>(p) + 999));
    ++blocks;
  }
  CHECK(blocks > 0);
  CHECK(BootstrapUsed() <= kBootstrapArenaBytes);
  CHECK(BootstrapAlloc(1000, 16) == nullptr);
}
