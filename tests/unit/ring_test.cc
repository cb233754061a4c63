// Ring tests: wrap-around with padding, full ring -> drop, and a concurrent
// producer/consumer that checks every record arrives intact and in order.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "preload/ring.h"

using flightrec::RecordHeader;
using flightrec::Ring;

namespace {
struct Rec {
  uint64_t seq;
  uint64_t check;
};
}  // namespace

TEST_CASE("ring: records round trip and wrap with padding") {
  alignas(64) static uint8_t buf[256];
  Ring r;
  r.Init(buf, sizeof(buf));
  uint64_t next_in = 0, next_out = 0;
  // 24-byte records (8 header + 16) in a 256-byte ring: wraps many times, with padding.
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 3; ++i) {
      void* p = r.Reserve(7, sizeof(Rec));
      REQUIRE(p != nullptr);
      Rec rec{next_in, next_in * 31};
      memcpy(p, &rec, sizeof(rec));
      r.Commit();
      ++next_in;
    }
    size_t n = r.Drain([&](const RecordHeader& h, const void* payload) {
      CHECK(h.kind == 7);
      CHECK(h.size == 24);
      Rec rec;
      memcpy(&rec, payload, sizeof(rec));
      CHECK(rec.seq == next_out);
      CHECK(rec.check == next_out * 31);
      ++next_out;
    });
    CHECK(n == 3);
  }
  CHECK(r.Empty());
}

TEST_CASE("ring: a full ring refuses records and recovers after drain") {
  alignas(64) static uint8_t buf[128];
  Ring r;
  r.Init(buf, sizeof(buf));
  int accepted = 0;
  for (int i = 0; i < 20; ++i) {
    if (r.Reserve(1, 8)) {
      r.Commit();
      ++accepted;
    }
  }
  CHECK(accepted == 8);  // 128 / 16 bytes per record
  CHECK(r.Reserve(1, 8) == nullptr);
  CHECK(r.Drain([](const RecordHeader&, const void*) {}) == 8);
  CHECK(r.Reserve(1, 8) != nullptr);
  r.Commit();
  // Records larger than half the ring are always refused.
  CHECK(r.Reserve(1, 100) == nullptr);
}

TEST_CASE("ring: the consumer is nudged once each time the ring passes a quarter full") {
  alignas(64) static uint8_t buf[256];
  Ring r;
  r.Init(buf, sizeof(buf));
  // 16-byte records: 4 fill a quarter of the ring, the 5th passes it.
  auto push = [&r] {
    REQUIRE(r.Reserve(1, 8) != nullptr);
    r.Commit();
    return r.TakeNudge();
  };
  for (int i = 0; i < 4; ++i) CHECK_FALSE(push());
  CHECK(push());  // 5th: past a quarter
  for (int i = 0; i < 11; ++i) CHECK_FALSE(push());  // once per filling, up to full
  CHECK(r.Reserve(1, 8) == nullptr);
  CHECK(r.Drain([](const RecordHeader&, const void*) {}) == 16);
  // Drained: the next filling nudges again, at the same point.
  for (int i = 0; i < 4; ++i) CHECK_FALSE(push());
  CHECK(push());
  // Again after the next drain, across the wrap.
  CHECK(r.Drain([](const RecordHeader&, const void*) {}) == 5);
  for (int i = 0; i < 4; ++i) CHECK_FALSE(push());
  CHECK(push());
}

TEST_CASE("ring: an offered bigger buffer is taken at a wrap on its own size, and nothing is lost or reordered") {
  alignas(64) static uint8_t base[256];
  alignas(64) static uint8_t grown[1024];
  memset(grown, 0xee, sizeof(grown));
  Ring r;
  r.Init(base, sizeof(base));
  CHECK(r.OfferGrowth(grown, sizeof(grown)));
  CHECK_FALSE(r.OfferGrowth(grown, sizeof(grown)));  // one offer per Init
  uint64_t next_in = 0, next_out = 0;
  bool in_order = true;
  auto consume = [&](const RecordHeader&, const void* payload) {
    Rec rec;
    memcpy(&rec, payload, sizeof(rec));
    if (rec.seq != next_out || rec.check != next_out * 31) in_order = false;
    ++next_out;
  };
  // Fill most of the base ring before every drain, so unread records of the
  // old buffer are still there when the producer switches.
  for (int round = 0; round < 40; ++round) {
    for (int i = 0; i < 8; ++i) {
      void* p = r.Reserve(7, sizeof(Rec));
      REQUIRE(p != nullptr);
      Rec rec{next_in, next_in * 31};
      memcpy(p, &rec, sizeof(rec));
      r.Commit();
      ++next_in;
    }
    r.Drain(consume);
  }
  CHECK(in_order);
  CHECK(next_out == next_in);
  CHECK(r.consumer_capacity() == sizeof(grown));  // switched
  CHECK(r.capacity() == sizeof(base));            // the base, for the largest record
  bool grown_used = false;
  for (uint8_t b : grown) grown_used |= b != 0xee;
  CHECK(grown_used);
  // The grown ring holds four times as much before it refuses.
  int accepted = 0;
  while (r.Reserve(7, sizeof(Rec)) != nullptr) {
    r.Commit();
    ++accepted;
  }
  CHECK(accepted * 24 > 3 * 256);
  // Reset goes back to the base buffer and drops the offer.
  r.Reset();
  CHECK(r.consumer_capacity() == sizeof(base));
  CHECK(r.offered_buffer() == nullptr);
}

TEST_SUITE("concurrency") {
  TEST_CASE("ring: growth offered while a producer pushes loses and reorders nothing") {
    std::vector<uint8_t> storage(4096 + 64), bigger(16384 + 64);
    auto align = [](std::vector<uint8_t>& v) {
      return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
    };
    Ring r;
    r.Init(align(storage), 4096);
    constexpr uint64_t kTotal = 200000;
    std::atomic<bool> done{false}, halfway{false}, offered{false};
    uint64_t accepted = 0, dropped = 0, attempts = 0, accepted_at_offer = 0;
    std::thread producer([&] {
      // Past kTotal, on until 2000 records went in after the offer: the
      // switch needs a wrap onto a multiple of 16 KiB, a few trips away.
      for (uint64_t i = 0; i < kTotal || accepted < accepted_at_offer + 2000; ++i, ++attempts) {
        // Halfway, wait for the offer: it then comes while records are in flight.
        if (i == kTotal / 2) {
          accepted_at_offer = accepted;
          halfway.store(true, std::memory_order_release);
          while (!offered.load(std::memory_order_acquire)) std::this_thread::yield();
        }
        const uint32_t extra = static_cast<uint32_t>(i % 5) * 8;
        void* p = r.Reserve(3, sizeof(Rec) + extra);
        if (!p) {
          ++dropped;
          continue;
        }
        Rec rec{accepted, accepted ^ 0x5a5a5a5aull};
        memcpy(p, &rec, sizeof(rec));
        r.Commit();
        ++accepted;
      }
      done.store(true, std::memory_order_release);
    });
    uint64_t received = 0;
    bool in_order = true;
    auto consume = [&](const RecordHeader& h, const void* payload) {
      Rec rec;
      memcpy(&rec, payload, sizeof(rec));
      if (h.kind != 3 || rec.seq != received || rec.check != (received ^ 0x5a5a5a5aull)) in_order = false;
      ++received;
    };
    while (!done.load(std::memory_order_acquire)) {
      r.Drain(consume);
      if (!offered.load(std::memory_order_relaxed) && halfway.load(std::memory_order_acquire))
        offered.store(r.OfferGrowth(align(bigger), 16384), std::memory_order_release);
    }
    producer.join();
    r.Drain(consume);
    CHECK(offered.load());
    CHECK(r.consumer_capacity() == 16384);
    CHECK(in_order);
    CHECK(received == accepted);
    CHECK(accepted + dropped == attempts);
  }


  TEST_CASE("ring: concurrent producer and consumer lose nothing they accepted") {
    std::vector<uint8_t> storage(4096 + 64);
    auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t{63});
    Ring r;
    r.Init(aligned, 4096);
    constexpr uint64_t kTotal = 200000;
    std::atomic<bool> done{false};
    uint64_t accepted = 0, dropped = 0;
    std::thread producer([&] {
      for (uint64_t i = 0; i < kTotal; ++i) {
        // Variable sizes exercise padding at the end of the ring.
        const uint32_t extra = static_cast<uint32_t>(i % 5) * 8;
        void* p = r.Reserve(3, sizeof(Rec) + extra);
        if (!p) {
          ++dropped;
          continue;
        }
        Rec rec{accepted, accepted ^ 0x5a5a5a5aull};
        memcpy(p, &rec, sizeof(rec));
        r.Commit();
        ++accepted;
      }
      done.store(true, std::memory_order_release);
    });
    uint64_t received = 0;
    bool in_order = true;
    auto consume = [&](const RecordHeader& h, const void* payload) {
      Rec rec;
      memcpy(&rec, payload, sizeof(rec));
      if (h.kind != 3 || rec.seq != received || rec.check != (received ^ 0x5a5a5a5aull)) in_order = false;
      ++received;
    };
    while (!done.load(std::memory_order_acquire)) r.Drain(consume);
    producer.join();
    r.Drain(consume);
    CHECK(in_order);
    CHECK(received == accepted);
    CHECK(accepted + dropped == kTotal);
  }
}
