// Unit tests for the allocation events' flush side (preload/alloc/alloc_events.h):
// ring records in, alloc.sample / alloc.free events out through a real
// SegmentWriter, read back with the C++ reader; malformed records are
// clamped, never read past their end.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "format/segment_reader.h"
#include "format/segment_writer.h"
#include "preload/alloc/alloc_events.h"
#include "preload/flush/flush_registry_internal.h"
#include "preload/threads/record_kinds.h"
#include "preload/threads/thread_registry.h"
#include "tests/unit/format_test_util.h"

using namespace flightrec;
using namespace flightrec::alloc;

namespace {

// Once per process, whichever test file comes first (alloc_stack_refs_test.cc too).
void RegisterOnce() {
  if (!DecoderFor(kRecAllocSample)) RegisterAllocEvents();
}

// A record as the ring holds it: header, then payload, 8-byte aligned.
std::vector<uint64_t> Record(uint16_t kind, const void* payload, uint32_t bytes, uint32_t claimed_size = 0) {
  std::vector<uint64_t> buf(1 + (bytes + 7) / 8, 0);
  RecordHeader h{kind, 0, claimed_size ? claimed_size : static_cast<uint32_t>(buf.size() * 8)};
  memcpy(buf.data(), &h, sizeof(h));
  memcpy(buf.data() + 1, payload, bytes);
  return buf;
}

void Decode(FlushContext& ctx, const std::vector<uint64_t>& rec) {
  const auto* h = reinterpret_cast<const RecordHeader*>(rec.data());
  RecordDecodeFn fn = DecoderFor(h->kind);
  const bool registered = fn != nullptr;
  REQUIRE(registered);
  fn(ctx, *h, rec.data() + 1);
}

}  // namespace

TEST_CASE("alloc_events: samples and frees decode into the fixed event layouts") {
  RegisterOnce();
  CHECK(std::string(RecordKindName(kRecAllocSample)) == "alloc.sample");
  CHECK(std::string(RecordKindName(kRecAllocFree)) == "alloc.free");
  format_test::TempDir dir;
  format::SegmentWriter w;
  DefineAllEventTypes(&w);
  std::string err;
  REQUIRE_MESSAGE(w.Open(dir.File("a.active"), format_test::Header(), &err), err);
  ThreadState ts;
  ts.tid = 4321;
  FlushContext ctx{&w, &ts, 5000};

  AllocSampleRecord s{};
  s.time_ns = 1000;
  s.address = 0x7f0000001000;
  s.size = 4096;
  s.sample_bytes = 524288;
  s.npcs = 3;
  s.pcs[0] = 0x401000;
  s.pcs[1] = 0x402000;
  s.pcs[2] = 0x403000;
  Decode(ctx, Record(kRecAllocSample, &s, AllocSampleRecordBytes(3)));

  // Claims 64 frames but carries 2: only what the record holds is read.
  AllocSampleRecord lying = s;
  lying.time_ns = 1500;
  lying.address = 0x7f0000002000;
  lying.npcs = 64;
  Decode(ctx, Record(kRecAllocSample, &lying, AllocSampleRecordBytes(2)));

  // Too short to be a sample at all: ignored.
  Decode(ctx, Record(kRecAllocSample, &s, 16));

  AllocFreeRecord f{2000, 0x7f0000001000};
  Decode(ctx, Record(kRecAllocFree, &f, sizeof(f)));
  REQUIRE_MESSAGE(w.Seal({}, &err), err);

  format::Segment seg = format::ReadSegmentFile(dir.File("a.active"));
  REQUIRE(seg.problems.empty());
  const format::SchemaType* st = seg.TypeByName("alloc.sample");
  const format::SchemaType* ft = seg.TypeByName("alloc.free");
  REQUIRE(st);
  REQUIRE(ft);
  std::vector<std::string> names;
  for (const auto& field : st->fields) names.push_back(field.name);
  CHECK(names == std::vector<std::string>{"time", "tid", "address", "size", "stack", "sample_bytes"});
  CHECK(st->fields[4].type_code == static_cast<uint8_t>(format::FieldType::kStack));
  names.clear();
  for (const auto& field : ft->fields) names.push_back(field.name);
  CHECK(names == std::vector<std::string>{"time", "tid", "address"});

  auto samples = seg.EventsOf("alloc.sample");
  REQUIRE(samples.size() == 2);
  const auto& v = samples[0]->values;
  CHECK(v[0].u == 1000);
  CHECK(v[1].u == 4321);
  CHECK(v[2].u == 0x7f0000001000);
  CHECK(v[3].u == 4096);
  CHECK(v[5].u == 524288);
  const auto* stack = seg.Stack(static_cast<uint32_t>(v[4].u));
  REQUIRE(stack);
  REQUIRE(stack->size() == 3);
  CHECK(seg.LocationById((*stack)[0])->address == 0x401000);
  CHECK(seg.LocationById((*stack)[2])->address == 0x403000);
  const auto* clamped = seg.Stack(static_cast<uint32_t>(samples[1]->values[4].u));
  REQUIRE(clamped);
  CHECK(clamped->size() == 2);

  auto frees = seg.EventsOf("alloc.free");
  REQUIRE(frees.size() == 1);
  CHECK(frees[0]->values[0].u == 2000);
  CHECK(frees[0]->values[1].u == 4321);
  CHECK(frees[0]->values[2].u == 0x7f0000001000);
}
