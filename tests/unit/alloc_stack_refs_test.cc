// Unit tests for allocation samples by stack reference (preload/alloc/stack_refs.h,
// alloc::PushAllocSample, the alloc.sample decoders): a repeated stack costs
// its hash in the ring, not its frames; the decoded events still carry the
// whole stack; a full record that was dropped is never referred to; a slot
// with a new owner starts over on both sides.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "format/segment_reader.h"
#include "format/segment_writer.h"
#include "preload/alloc/alloc_events.h"
#include "preload/alloc/alloc_profiler.h"
#include "preload/alloc/stack_refs.h"
#include "preload/flush/flush_registry_internal.h"
#include "preload/threads/record_kinds.h"
#include "preload/threads/thread_registry.h"
#include "tests/unit/format_test_util.h"

using namespace flightrec;

namespace {

constexpr size_t kRing = 4096;
constexpr uint32_t kDepth = 30;

struct Fixture {
  std::vector<uint8_t> storage = std::vector<uint8_t>(kRing + 64);
  std::unique_ptr<ThreadState> ts = std::make_unique<ThreadState>();
  Fixture() {
    // Once per process, whichever test file comes first (alloc_events_test.cc too).
    if (!DecoderFor(kRecAllocSample)) alloc::RegisterAllocEvents();
    auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t{63});
    ts->ring.Init(base, kRing);
    // Growth is not under test: hold the one right to offer, so a full ring
    // stays full (no spare taken).
    REQUIRE(ts->ring.ClaimOffer());
    ts->tid = 777;
    ts->generation = 1;
    PushedStacksOf(ts.get()).Clear();
  }
  // Drains the ring through the registered decoders; returns the kinds seen.
  std::vector<uint16_t> Drain(FlushContext& ctx) {
    std::vector<uint16_t> kinds;
    ts->ring.Drain([&](const RecordHeader& h, const void* payload) {
      kinds.push_back(h.kind);
      RecordDecodeFn fn = DecoderFor(h.kind);
      if (fn) fn(ctx, h, payload);
    });
    return kinds;
  }
};

std::vector<uint64_t> StackOf(uint64_t base) {
  std::vector<uint64_t> pcs(kDepth);
  for (uint32_t i = 0; i < kDepth; ++i) pcs[i] = base + 0x10 * i;
  return pcs;
}

std::vector<uint64_t> Addresses(const format::Segment& seg, uint64_t stack_id) {
  std::vector<uint64_t> out;
  const auto* st = seg.Stack(static_cast<uint32_t>(stack_id));
  if (!st) return out;
  for (uint32_t loc : *st) out.push_back(seg.LocationById(loc)->address);
  return out;
}

}  // namespace

TEST_CASE("alloc stack refs: a repeated stack costs its hash, and decodes to the whole stack") {
  Fixture f;
  const std::vector<uint64_t> a = StackOf(0x401000);
  // Nothing drains: a 30-frame full record takes 304 bytes, so 13 would fit
  // the 4 KiB ring in full; by reference (40 bytes) about 95 do.
  int pushed = 0;
  while (pushed < 200 && alloc::PushAllocSample(f.ts.get(), reinterpret_cast<void*>(0x10000 + 64 * pushed), 100, 65536,
                                                a.data(), kDepth))
    ++pushed;
  CHECK(pushed >= 90);
  CHECK(pushed < 200);

  format_test::TempDir dir;
  format::SegmentWriter w;
  DefineAllEventTypes(&w);
  std::string err;
  REQUIRE_MESSAGE(w.Open(dir.File("a.active"), format_test::Header(), &err), err);
  FlushContext ctx{&w, f.ts.get(), 5000};
  const std::vector<uint16_t> kinds = f.Drain(ctx);
  REQUIRE(kinds.size() == static_cast<size_t>(pushed));
  CHECK(kinds[0] == kRecAllocSample);
  for (size_t i = 1; i < kinds.size(); ++i) CHECK(kinds[i] == kRecAllocSampleRef);
  REQUIRE_MESSAGE(w.Seal({}, &err), err);

  format::Segment seg = format::ReadSegmentFile(dir.File("a.active"));
  REQUIRE(seg.problems.empty());
  auto samples = seg.EventsOf("alloc.sample");
  REQUIRE(samples.size() == static_cast<size_t>(pushed));
  for (int i = 0; i < pushed; ++i) {
    const auto& v = samples[i]->values;
    CHECK(v[1].u == 777);
    CHECK(v[2].u == static_cast<uint64_t>(0x10000 + 64 * i));
    CHECK(v[3].u == 100);
    CHECK(v[5].u == 65536);
    CHECK(Addresses(seg, v[4].u) == a);
  }
}

TEST_CASE("alloc stack refs: a dropped full record is never referred to; a new owner starts over") {
  Fixture f;
  const std::vector<uint64_t> a = StackOf(0x401000), b = StackOf(0x501000);
  while (alloc::PushAllocSample(f.ts.get(), nullptr, 100, 65536, a.data(), kDepth)) {}
  // The ring is full: b's full record is dropped, so b must not become known.
  CHECK_FALSE(alloc::PushAllocSample(f.ts.get(), reinterpret_cast<void*>(0xb0), 100, 65536, b.data(), kDepth));
  CHECK_FALSE(PushedStacksOf(f.ts.get()).Known(HashStack(b.data(), kDepth)));

  format_test::TempDir dir;
  format::SegmentWriter w;
  DefineAllEventTypes(&w);
  std::string err;
  REQUIRE_MESSAGE(w.Open(dir.File("b.active"), format_test::Header(), &err), err);
  FlushContext ctx{&w, f.ts.get(), 5000};
  f.Drain(ctx);
  REQUIRE(alloc::PushAllocSample(f.ts.get(), reinterpret_cast<void*>(0xb1), 200, 65536, b.data(), kDepth));
  CHECK(f.Drain(ctx) == std::vector<uint16_t>{kRecAllocSample});

  // The slot's next owner: its producer cache is cleared with the ring
  // (thread_registry.cc), and the consumer forgets at the new generation.
  // A reference it could not resolve (forged here) keeps its weight with no stack.
  f.ts->ring.Reset();
  REQUIRE(f.ts->ring.ClaimOffer());
  PushedStacksOf(f.ts.get()).Clear();
  f.ts->generation = 2;
  {
    RecordWriter rw(f.ts.get(), kRecAllocSampleRef, sizeof(alloc::AllocSampleRefRecord), IfUnregistered::kSkip);
    REQUIRE(rw.ok());
    auto* r = static_cast<alloc::AllocSampleRefRecord*>(rw.data());
    *r = {9000, 0xf0, 300, HashStack(a.data(), kDepth)};
  }
  REQUIRE(alloc::PushAllocSample(f.ts.get(), reinterpret_cast<void*>(0xa1), 400, 65536, a.data(), kDepth));
  CHECK(f.Drain(ctx) == std::vector<uint16_t>{kRecAllocSampleRef, kRecAllocSample});
  REQUIRE_MESSAGE(w.Seal({}, &err), err);

  format::Segment seg = format::ReadSegmentFile(dir.File("b.active"));
  REQUIRE(seg.problems.empty());
  std::vector<const format::Event*> tail;
  for (const auto* e : seg.EventsOf("alloc.sample"))
    if (e->values[2].u != 0) tail.push_back(e);  // the first loop's are at 0
  REQUIRE(tail.size() == 3);
  CHECK(tail[0]->values[2].u == 0xb1);
  CHECK(Addresses(seg, tail[0]->values[4].u) == b);
  CHECK(tail[1]->values[2].u == 0xf0);
  CHECK(tail[1]->values[3].u == 300);
  CHECK(tail[1]->values[4].u == 0);
  CHECK(tail[2]->values[2].u == 0xa1);
  CHECK(Addresses(seg, tail[2]->values[4].u) == a);
}
