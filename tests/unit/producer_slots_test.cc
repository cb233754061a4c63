// Producer slots unit tests (prefix "producer slots"): the ranges of a
// thread's slot that producers own (preload/threads/producer_slots.h) never
// overlap, stay line-aligned, fit the area in ThreadState, and each
// producer's accessor lands in its own range.
#include <doctest/doctest.h>

#include <memory>

#include "preload/alloc/stack_refs.h"
#include "preload/sockets/socket_gaps.h"
#include "preload/threads/thread_registry.h"

using namespace flightrec;

TEST_CASE("producer slots: ranges are line-aligned, disjoint and inside the thread's slot") {
  uint32_t end = 0;
  for (const ProducerSlotSpec& s : kProducerSlots) {
    CHECK(s.offset % kProducerSlotAlign == 0);
    CHECK(s.offset >= end);  // after the previous one: disjoint
    CHECK(s.bytes > 0);
    end = s.offset + s.bytes;
  }
  CHECK(end <= kProducerSlotBytes);
  CHECK(sizeof(ThreadState::producer_slots) == kProducerSlotBytes);
}

TEST_CASE("producer slots: each producer's accessor lands in its range; a new slot's ranges are empty") {
  auto ts = std::make_unique<ThreadState>();
  auto* base = reinterpret_cast<unsigned char*>(ts->producer_slots);
  auto in_range = [&](const void* p, size_t n, const ProducerSlotSpec& s) {
    auto* b = static_cast<const unsigned char*>(p);
    return b >= base + s.offset && b + n <= base + s.offset + s.bytes;
  };
  CHECK(in_range(&PushedStacksOf(ts.get()), sizeof(StackRefCache), kSlotAllocStacksPushed));
  CHECK(in_range(&StackTableOf(ts.get()), sizeof(StackRefTable*), kSlotAllocStacksTable));
  CHECK(in_range(&SocketGapsOf(ts.get()), sizeof(SockGapTable), kSlotSocketGaps));
  // All-zero bytes are each type's initial state.
  CHECK(StackTableOf(ts.get()) == nullptr);
  CHECK_FALSE(PushedStacksOf(ts.get()).Known(1));
  CHECK(SocketGapsOf(ts.get()).changes.load() == 0);
  // A thread's marks stay in its range.
  PushedStacksOf(ts.get()).MarkCommitted(12345);
  CHECK(PushedStacksOf(ts.get()).Known(12345));
  CHECK(StackTableOf(ts.get()) == nullptr);
  CHECK(SocketGapsOf(ts.get()).changes.load() == 0);
}
