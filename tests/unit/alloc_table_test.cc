// Unit tests for one address table, a tier of the sampled-address set (preload/alloc/alloc_table.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "tests/unit/address_keys.h"
#include "preload/alloc/alloc_table.h"

using flightrec::alloc::AddressTable;

TEST_CASE("alloc_table: insert, find, remove") {
  AddressTable set;
  REQUIRE(set.Init(1000));
  CHECK(set.capacity() == 1000);
  CHECK_FALSE(set.MaybeContains(0x1000));
  CHECK(set.Insert(0x1000));
  CHECK(set.MaybeContains(0x1000));
  CHECK(set.Contains(0x1000));
  CHECK_FALSE(set.Contains(0x2000));
  CHECK(set.live() == 1);
  CHECK(set.Remove(0x1000));
  CHECK_FALSE(set.Remove(0x1000));
  CHECK_FALSE(set.Contains(0x1000));
  CHECK_FALSE(set.MaybeContains(0x1000));  // nothing live at all
  CHECK(set.live() == 0);
  CHECK(set.full_count() == 0);
  CHECK_FALSE(set.Insert(0));  // null is never a key
}

TEST_CASE("alloc_table: an uninitialised set is empty and refuses inserts") {
  AddressTable set;
  CHECK_FALSE(set.MaybeContains(0x1000));
  CHECK_FALSE(set.Insert(0x1000));
  CHECK_FALSE(set.Remove(0x1000));
}

TEST_CASE("alloc_table: refuses beyond capacity and counts what did not fit") {
  AddressTable set;
  REQUIRE(set.Init(100));
  const auto addrs = PseudoAddresses(150, 1);
  int inserted = 0;
  for (uintptr_t a : addrs) inserted += set.Insert(a) ? 1 : 0;
  CHECK(inserted == 100);
  CHECK(set.full_count() == 50);
  CHECK(set.live() == 100);
  // Exactly the accepted ones are found.
  int found = 0;
  for (uintptr_t a : addrs) found += set.Contains(a) ? 1 : 0;
  CHECK(found == 100);
  // Room frees up again after removals.
  for (uintptr_t a : addrs) set.Remove(a);
  CHECK(set.live() == 0);
  CHECK(set.Insert(addrs[0]));
}

TEST_CASE("alloc_table: a full small table keeps every key findable through overflow chains") {
  // The smallest table (64 buckets x 7 slots) filled to its limit forces many
  // keys past their home bucket; removing and re-adding in a shuffled order
  // must never lose one or find a removed one.
  AddressTable set;
  REQUIRE(set.Init(200));
  const uint64_t cap = set.capacity();
  REQUIRE(cap == 200);
  auto addrs = PseudoAddresses(cap, 7);
  for (uintptr_t a : addrs) REQUIRE(set.Insert(a));
  std::mt19937_64 rng(3);
  std::set<uintptr_t> in(addrs.begin(), addrs.end());
  for (int round = 0; round < 20; ++round) {
    std::shuffle(addrs.begin(), addrs.end(), rng);
    for (size_t i = 0; i < addrs.size() / 2; ++i) {
      CHECK(set.Remove(addrs[i]));
      in.erase(addrs[i]);
    }
    for (uintptr_t a : addrs) CHECK(set.Contains(a) == (in.count(a) == 1));
    for (size_t i = 0; i < addrs.size() / 2; ++i) {
      CHECK(set.Insert(addrs[i]));
      in.insert(addrs[i]);
    }
  }
  for (uintptr_t a : addrs) CHECK(set.Contains(a));
  const auto others = PseudoAddresses(2000, 99);
  int false_hits = 0;
  for (uintptr_t a : others)
    if (!in.count(a)) false_hits += set.Contains(a) ? 1 : 0;
  CHECK(false_hits == 0);
  CHECK(set.full_count() == 0);
}

TEST_SUITE("concurrency") {
  TEST_CASE("alloc_table: concurrent inserts and removes stay consistent") {
    AddressTable set;
    REQUIRE(set.Init(4096));
    constexpr int kThreads = 4;
    constexpr int kPerThread = 800;  // 3200 live at the peak, within capacity
    std::atomic<int> lost{0}, phantom{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const auto mine = PseudoAddresses(kPerThread, 1000 + t);
        for (int round = 0; round < 20; ++round) {
          for (uintptr_t a : mine)
            if (!set.Insert(a)) lost++;
          for (uintptr_t a : mine)
            if (!set.MaybeContains(a) || !set.Contains(a)) lost++;
          for (uintptr_t a : mine)
            if (!set.Remove(a)) lost++;
          for (uintptr_t a : mine)
            if (set.Contains(a)) phantom++;
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(lost.load() == 0);
    CHECK(phantom.load() == 0);
    CHECK(set.live() == 0);
    CHECK(set.full_count() == 0);
  }
}

TEST_CASE("alloc_table: the free() filter never hides a stored key, also past a saturated summary slot") {
  // 300 keys whose hashes share their low 11 bits (one summary slot, which
  // saturates at 255 and stays "maybe"), found with the set's own hash.
  auto hash = [](uintptr_t a) { return static_cast<size_t>(((a >> 4) * 0x9E3779B97F4A7C15ull) >> 40); };
  std::vector<uintptr_t> same;
  const uintptr_t base = 0x7f0000000000ull;
  const size_t target = hash(base) & 2047;
  for (uintptr_t a = base; same.size() < 300; a += 16)
    if ((hash(a) & 2047) == target) same.push_back(a);
  AddressTable set;
  REQUIRE(set.Init(1 << 22));  // 2^21 buckets: the 300 keys spread over 256 home buckets
  for (uintptr_t a : same) REQUIRE(set.Insert(a));
  for (uintptr_t a : same) CHECK(set.MaybeContains(a));
  const uintptr_t other = 0x5000;  // keeps something live once `same` is gone
  REQUIRE(set.Insert(other));
  for (uintptr_t a : same) CHECK(set.Remove(a));
  CHECK(set.MaybeContains(other));
  size_t maybe = 0;
  for (uintptr_t a : same) maybe += set.MaybeContains(a) ? 1 : 0;
  CHECK(maybe == 0);  // the sticky slot sends them to the home counts, which are 0
  // An address never stored, in an untouched summary slot: no further load needed, and false.
  uintptr_t fresh = base + 16;
  while ((hash(fresh) & 2047) == target || (hash(fresh) & 2047) == (hash(other) & 2047)) fresh += 16;
  CHECK_FALSE(set.MaybeContains(fresh));
}
