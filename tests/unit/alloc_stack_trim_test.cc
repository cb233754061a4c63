// Unit tests for allocation stack trimming (preload/alloc/alloc_stack_trim.h).
#include <doctest/doctest.h>

#include <cstdint>
#include <new>

#include "preload/alloc/alloc_stack_trim.h"

using namespace flightrec::alloc;

namespace {
__attribute__((noinline)) int MarkerFunction(int x) { return x * 3 + 1; }
}  // namespace

TEST_CASE("alloc_stack_trim: only leading frames inside a range are trimmed") {
  TrimRanges r;
  r.Add(100, 200);
  r.Add(1000, 1100);
  r.Add(5, 5);  // empty: ignored
  CHECK(r.size() == 2);
  const uint64_t pcs[] = {150, 1050, 199, 300, 150, 400};
  CHECK(r.LeadingTrimmed(pcs, 6) == 3);
  const uint64_t none[] = {99, 150};
  CHECK(r.LeadingTrimmed(none, 2) == 0);
  const uint64_t all[] = {100, 1099};
  CHECK(r.LeadingTrimmed(all, 2) == 2);
  CHECK_FALSE(r.Contains(200));  // half-open
}

TEST_CASE("alloc_stack_trim: the text range of an object covers its functions") {
  TrimRanges r;
  CHECK(AddObjectTextRanges(reinterpret_cast<void*>(&MarkerFunction), &r) >= 1);
  CHECK(r.Contains(reinterpret_cast<uint64_t>(&MarkerFunction)));
  int on_stack = 0;
  CHECK_FALSE(r.Contains(reinterpret_cast<uint64_t>(&on_stack)));
  CHECK(MarkerFunction(1) == 4);
}

TEST_CASE("alloc_stack_trim: operator new variants are found with their sizes") {
  TrimRanges r;
  CHECK(AddOperatorNewRanges(&r) >= 2);  // at least new and new[] from libstdc++
  using NewFn = void* (*)(std::size_t);
  const auto plain = reinterpret_cast<uint64_t>(static_cast<NewFn>(&::operator new));
  const auto array = reinterpret_cast<uint64_t>(static_cast<NewFn>(&::operator new[]));
  // A pc a few bytes into operator new (a return address after its call to
  // malloc is one) is covered; the test's own code is not.
  CHECK(r.Contains(plain));
  CHECK(r.Contains(plain + 8));
  CHECK(r.Contains(array));
  CHECK_FALSE(r.Contains(reinterpret_cast<uint64_t>(&MarkerFunction)));
}
