// Unit tests for the sampled-address set's tiers (preload/alloc/sampled_address_set.h):
// it starts with one small table, grows only when its tables are half full,
// and finds every key in whichever tier holds it.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "tests/unit/address_keys.h"
#include "preload/alloc/sampled_address_set.h"

using flightrec::alloc::SampledAddressSet;

TEST_CASE("sampled_address_set: a process with few live samples writes only the first, small table") {
  SampledAddressSet set;
  REQUIRE(set.Init(65536));
  CHECK(set.capacity() == 65536);
  CHECK(set.tier_count() == 2);  // the first table and an empty spare
  // Thousands of samples come and go, never more than 1000 live at once.
  const auto keys = PseudoAddresses(20000, 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    REQUIRE(set.Insert(keys[i]));
    if (i >= 1000) REQUIRE(set.Remove(keys[i - 1000]));
    if (i % 500 == 0) CHECK_FALSE(set.Grow());
  }
  CHECK(set.tier_count() == 2);
  CHECK(set.tier_live(0) == 1000);
  CHECK(set.tier_live(1) == 0);  // the spare was never written
  CHECK(set.full_count() == 0);
}

TEST_CASE("sampled_address_set: grows by tiers up to the setting; keys stay findable in every tier") {
  SampledAddressSet set;
  REQUIRE(set.Init(65536));
  const auto keys = PseudoAddresses(65536 + 100, 2);
  size_t inserted = 0;
  // Grow as the flush thread would, between bursts of 1000 inserts.
  while (inserted < 65536) {
    for (int k = 0; k < 1000 && inserted < 65536; ++k) REQUIRE(set.Insert(keys[inserted++]));
    set.Grow();
  }
  CHECK(set.tier_count() == 3);  // 4096 + 16384 + the 45056 left of the setting
  CHECK(set.live() == 65536);
  // The setting is the bound: past it, refused and counted.
  for (size_t i = 65536; i < keys.size(); ++i) CHECK_FALSE(set.Insert(keys[i]));
  CHECK(set.full_count() == 100);
  CHECK_FALSE(set.Grow());
  for (size_t i = 0; i < 65536; ++i) {
    REQUIRE(set.MaybeContains(keys[i]));
    REQUIRE(set.Contains(keys[i]));
  }
  for (size_t i = 65536; i < keys.size(); ++i) CHECK_FALSE(set.Contains(keys[i]));
  // Removing from every tier; freed room in the small tier is used again first.
  for (size_t i = 0; i < 65536; ++i) REQUIRE(set.Remove(keys[i]));
  CHECK(set.live() == 0);
  for (size_t i = 0; i < 65536; ++i) CHECK_FALSE(set.MaybeContains(keys[i]));
}

TEST_CASE("sampled_address_set: a burst goes on into the spare at once; only one past it is refused and counted") {
  SampledAddressSet set;
  REQUIRE(set.Init(65536));
  const auto keys = PseudoAddresses(4096 + 16384 + 100, 3);
  size_t refused = 0;
  for (uintptr_t k : keys)
    if (!set.Insert(k)) ++refused;
  CHECK(set.tier_count() == 2);  // nobody grew it: the first table and the spare took 20480
  CHECK(refused == 100);
  CHECK(set.full_count() == 100);
  REQUIRE(set.Grow());
  for (size_t i = 4096 + 16384; i < keys.size(); ++i) CHECK(set.Insert(keys[i]));
  CHECK(set.live() == keys.size());
}

TEST_CASE("sampled_address_set: a small setting is one table") {
  SampledAddressSet set;
  REQUIRE(set.Init(1024));
  const auto keys = PseudoAddresses(1100, 4);
  for (size_t i = 0; i < 1024; ++i) REQUIRE(set.Insert(keys[i]));
  CHECK_FALSE(set.Grow());
  CHECK(set.tier_count() == 1);  // no room left for a spare
  CHECK_FALSE(set.Insert(keys[1024]));
  CHECK(set.full_count() == 1);
}

TEST_CASE("sampled_address_set: an uninitialised set refuses and finds nothing") {
  SampledAddressSet set;
  CHECK_FALSE(set.Insert(0x1000));
  CHECK_FALSE(set.MaybeContains(0x1000));
  CHECK_FALSE(set.Grow());
  CHECK(set.live() == 0);
}

TEST_SUITE("concurrency") {
  TEST_CASE("sampled_address_set: hooks insert and remove while the flush thread adds tiers") {
    SampledAddressSet set;
    REQUIRE(set.Init(1 << 20));
    std::atomic<bool> done{false};
    std::atomic<int> lost{0}, phantom{0};
    std::thread grower([&] {
      while (!done.load()) {
        set.Grow();
        std::this_thread::yield();
      }
    });
    std::vector<std::thread> hooks;
    for (int t = 0; t < 4; ++t) {
      hooks.emplace_back([&, t] {
        const auto mine = PseudoAddresses(6000, 100 + t);  // more than the first tier holds
        for (int round = 0; round < 5; ++round) {
          for (uintptr_t a : mine)
            while (!set.Insert(a)) std::this_thread::yield();  // refused until the grower adds a tier
          for (uintptr_t a : mine)
            if (!set.MaybeContains(a) || !set.Contains(a)) lost++;
          for (uintptr_t a : mine)
            if (!set.Remove(a)) lost++;
          for (uintptr_t a : mine)
            if (set.Contains(a)) phantom++;
        }
      });
    }
    for (auto& th : hooks) th.join();
    done = true;
    grower.join();
    CHECK(lost.load() == 0);
    CHECK(phantom.load() == 0);
    CHECK(set.live() == 0);
    CHECK(set.tier_count() >= 2);  // one thread's 6000 waited for the second tier
  }
}
