// Unit tests for SegmentWriter: every field type round-trips through the C++
// reader, segments are self-contained, batches auto-flush, tables split, and
// errors are reported instead of aborting.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "format/fsize_guard.h"
#include "tests/unit/format_test_util.h"

using namespace format_test;

namespace {

EventTypeSpec AllTypesSpec() {
  return {"all.types",
          {{"time", FieldType::kTime, "ns"},
           {"u", FieldType::kUInt, "count"},
           {"s", FieldType::kSInt, ""},
           {"str", FieldType::kString, ""},
           {"stk", FieldType::kStack, ""},
           {"f", FieldType::kF64, "ratio"},
           {"b", FieldType::kBytes, "bytes"}}};
}

}  // namespace

TEST_CASE("format round trip of every field type, stacks and footer") {
  TempDir dir;
  FakeDescriber describer;
  SegmentWriter w;
  w.SetPcDescriber(&describer);
  uint32_t id = w.DefineEventType(AllTypesSpec());
  REQUIRE(id == 1);
  std::string err;
  REQUIRE_MESSAGE(w.Open(dir.File("a.active"), Header(3), &err), err);

  const uint64_t stack1[] = {0x400101, 0x400200, 0x900000};  // odd pc: inlined frame; last: unmapped
  const uint64_t stack2[] = {0x400200};
  const std::string blob("\x00\x01\xff payload", 11);
  Value e1[] = {Value::U(2'000'000'000), Value::U(UINT64_MAX), Value::S(-5),    Value::Str("hello"),
                Value::Stack(stack1, 3), Value::F(0.25),       Value::Str(blob)};
  Value e2[] = {Value::U(1'999'000'000),  Value::U(0),      Value::S(INT64_MIN), Value::Str(""),
                Value::Stack(nullptr, 0), Value::F(-1e300), Value::Str("")};
  Value e3[] = {Value::U(2'000'500'000), Value::U(300), Value::S(INT64_MAX), Value::Str("hello"),
                Value::Stack(stack2, 1), Value::F(3.5), Value::Str("x")};
  w.Append(id, e1, 7);
  w.Append(id, e2, 7);
  REQUIRE(w.Flush(&err));
  w.Append(id, e3, 7);
  CHECK(w.buffered_bytes() > 0);
  REQUIRE_MESSAGE(w.Seal({{"dropped.alloc.sample", 5}}, &err), err);
  CHECK_FALSE(w.is_open());
  CHECK(w.stats().events_written == 3);
  CHECK(describer.calls == 3);  // each distinct pc described once

  auto data = ReadAll(dir.File("a.active"));
  CHECK(w.stats().bytes_written == data.size());
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.state == SegmentState::kSealed);
  CHECK(seg.problems.empty());
  CHECK(seg.header.pid == 4242);
  CHECK(seg.header.sequence == 3);
  CHECK(seg.header.anchor_monotonic_ns == 1'000'000'000);
  CHECK(seg.header.anchor_realtime_ns == 1'700'000'000'000'000'000ull);
  CHECK(seg.header.service == "svc");
  CHECK(seg.header.host == "host-a");

  const SchemaType* t = seg.TypeByName("all.types");
  REQUIRE(t);
  CHECK(t->id == id);
  REQUIRE(t->fields.size() == 7);
  CHECK(t->fields[0].name == "time");
  CHECK(t->fields[0].unit == "ns");
  CHECK(t->fields[5].type_code == static_cast<uint8_t>(FieldType::kF64));
  CHECK(t->fields[6].unit == "bytes");

  REQUIRE(seg.events.size() == 3);
  const auto& v1 = seg.events[0].values;
  CHECK(v1[0].u == 2'000'000'000);
  CHECK(v1[1].u == UINT64_MAX);
  CHECK(v1[2].s == -5);
  CHECK(*seg.String(static_cast<uint32_t>(v1[3].u)) == "hello");
  CHECK(v1[5].f == 0.25);
  CHECK(v1[6].bytes == blob);
  const auto& v2 = seg.events[1].values;
  CHECK(v2[0].u == 1'999'000'000);  // times may go backwards within a block
  CHECK(v2[2].s == INT64_MIN);
  CHECK(v2[3].u == 0);  // empty string is id 0
  CHECK(v2[4].u == 0);  // no stack is id 0
  CHECK(v2[5].f == -1e300);
  CHECK(v2[6].bytes.empty());
  const auto& v3 = seg.events[2].values;
  CHECK(v3[2].s == INT64_MAX);
  CHECK(v3[3].u == v1[3].u);  // interned once
  CHECK(v3[6].bytes == "x");

  // Stack 1: three locations, leaf first.
  const auto* s1 = seg.Stack(static_cast<uint32_t>(v1[4].u));
  REQUIRE(s1);
  REQUIRE(s1->size() == 3);
  const Location* leaf = seg.LocationById((*s1)[0]);
  REQUIRE(leaf);
  CHECK(leaf->address == 0x400101);
  REQUIRE(leaf->lines.size() == 2);  // inlined helper first, then its caller
  CHECK(*seg.String(leaf->lines[0].function) == "inlined_helper");
  CHECK(*seg.String(leaf->lines[0].file) == "helper.h");
  CHECK(leaf->lines[0].line == 7);
  CHECK(*seg.String(leaf->lines[1].function) == "fn_" + std::to_string(0x400101));
  CHECK(leaf->lines[1].line == (0x400101 & 0xfff));
  const Mapping* m = seg.MappingById(leaf->mapping);
  REQUIRE(m);
  CHECK(m->start == 0x400000);
  CHECK(m->end == 0x500000);
  CHECK(m->file_offset == 0x1000);
  CHECK(*seg.String(m->path) == "/usr/bin/fake");
  CHECK(*seg.String(m->build_id) == "abcdef0123");
  const Location* unmapped = seg.LocationById((*s1)[2]);
  REQUIRE(unmapped);
  CHECK(unmapped->mapping == 0);
  CHECK(unmapped->address == 0x900000);
  CHECK(unmapped->lines.empty());
  // Stack 2 reuses the location of 0x400200.
  const auto* s2 = seg.Stack(static_cast<uint32_t>(v3[4].u));
  REQUIRE(s2);
  REQUIRE(s2->size() == 1);
  CHECK((*s2)[0] == (*s1)[1]);

  CHECK(seg.FooterValue("events") == 3u);
  CHECK(seg.FooterValue("first_time_ns") == 1'999'000'000u);
  CHECK(seg.FooterValue("last_time_ns") == 2'000'500'000u);
  CHECK(seg.FooterValue("dropped.alloc.sample") == 5u);
  CHECK_FALSE(seg.FooterValue("writer.rejected").has_value());
}

TEST_CASE("format AppendColumns writes what Append writes, with ids valid per segment") {
  TempDir dir;
  const EventTypeSpec spec{"col.event",
                           {{"time", FieldType::kTime, "ns"},
                            {"u", FieldType::kUInt, ""},
                            {"op", FieldType::kString, ""},
                            {"s", FieldType::kSInt, ""}},
                           /*packed=*/true};
  // The same events through Append (segment a) and AppendColumns (segment b).
  std::vector<std::vector<uint8_t>> files;
  for (int use_columns = 0; use_columns < 2; use_columns++) {
    SegmentWriter w;
    const uint32_t id = w.DefineEventType(spec);
    std::string err;
    const std::string path = dir.File(use_columns ? "b" : "a");
    REQUIRE_MESSAGE(w.Open(path, Header(), &err), err);
    for (int i = 0; i < 1000; i++) {
      const char* name = i % 3 ? "send" : "recv";
      const int64_t s = i % 7 ? i : -i;
      if (use_columns) {
        const uint64_t c[] = {1000u + 10u * i, 42, w.StringId(name), static_cast<uint64_t>(s)};
        w.AppendColumns(id, c, 4);
      } else {
        Value v[] = {Value::U(1000u + 10u * i), Value::U(42), Value::Str(name), Value::S(s)};
        w.Append(id, v, 4);
      }
    }
    REQUIRE_MESSAGE(w.Seal({}, &err), err);
    files.push_back(ReadAll(path));
  }
  CHECK(files[0] == files[1]);  // byte for byte
  Segment seg = ReadSegment(files[1].data(), files[1].size());
  REQUIRE(seg.events.size() == 1000);
  CHECK(*seg.String(static_cast<uint32_t>(seg.events[0].values[2].u)) == "recv");
  CHECK(seg.events[7].values[3].s == -7);

  // Ids die with the segment: the epoch changes at Seal and Open, and an id
  // cached under the old epoch must be asked for again.
  SegmentWriter w;
  const uint32_t id = w.DefineEventType(spec);
  std::string err;
  REQUIRE(w.Open(dir.File("c"), Header(), &err));
  const uint64_t epoch = w.string_epoch();
  const uint32_t send_id = w.StringId("send");
  CHECK(w.StringId("send") == send_id);
  REQUIRE(w.Seal({}, &err));
  REQUIRE(w.Open(dir.File("d"), Header(), &err));
  CHECK(w.string_epoch() != epoch);
  const uint64_t c[] = {5, 1, w.StringId("send"), 0};
  w.AppendColumns(id, c, 4);
  // Refused: wrong arity, unknown type, and a type with a stack field.
  const uint32_t stack_type =
      w.DefineEventType({"with.stack", {{"time", FieldType::kTime, "ns"}, {"stk", FieldType::kStack, ""}}});
  w.AppendColumns(id, c, 3);
  w.AppendColumns(9, c, 4);
  w.AppendColumns(stack_type, c, 2);
  REQUIRE(w.Seal({}, &err));
  // A new writer never reuses an epoch: ids cached from another writer (the
  // flush thread is restarted with a new one around a privilege drop) are
  // never taken for its own.
  {
    SegmentWriter other;
    other.DefineEventType(spec);
    REQUIRE(other.Open(dir.File("e"), Header(), &err));
    CHECK(other.string_epoch() != w.string_epoch());
    CHECK(other.string_epoch() != epoch);
    REQUIRE(other.Seal({}, &err));
  }
  Segment d = ReadSegmentFile(dir.File("d"));
  REQUIRE(d.events.size() == 1);
  CHECK(*d.String(static_cast<uint32_t>(d.events[0].values[2].u)) == "send");
  CHECK(d.FooterValue("writer.rejected") == 3u);
}

TEST_CASE("format a batch array grown by a burst is given back after a small batch") {
  TempDir dir;
  SegmentWriter w;
  const uint32_t id =
      w.DefineEventType({"burst.event", {{"time", FieldType::kTime, "ns"}, {"u", FieldType::kUInt, ""}}, true});
  std::string err;
  REQUIRE_MESSAGE(w.Open(dir.File("a"), Header(), &err), err);
  CHECK(w.batch_capacity(id) == 0);
  auto append = [&](int n, uint64_t t0) {
    for (int i = 0; i < n; i++) {
      const uint64_t c[] = {t0 + static_cast<uint64_t>(i), static_cast<uint64_t>(i)};
      w.AppendColumns(id, c, 2);
    }
  };
  append(3000, 1000);  // a burst: the array grows by doubling
  CHECK(w.batch_capacity(id) >= 3000);
  const uint32_t grown = w.batch_capacity(id);
  REQUIRE(w.Flush(&err));
  CHECK(w.batch_capacity(id) == grown);  // that batch filled it: kept
  append(100, 10000);                    // a quiet batch
  REQUIRE(w.Flush(&err));
  CHECK(w.batch_capacity(id) == 0);  // under a quarter: given back
  append(100, 20000);
  CHECK(w.batch_capacity(id) == 128);  // grows again from 16
  const uint32_t quiet =
      w.DefineEventType({"quiet.event", {{"time", FieldType::kTime, "ns"}, {"u", FieldType::kUInt, ""}}, true});
  const uint64_t one[] = {30000, 1};
  w.AppendColumns(quiet, one, 2);
  CHECK(w.batch_capacity(quiet) == 16);  // a type's first array is small
  REQUIRE(w.Seal({}, &err));
  // Every event read back as written, across the release.
  std::vector<uint8_t> file = ReadAll(dir.File("a"));
  Segment seg = ReadSegment(file.data(), file.size());
  REQUIRE(seg.events.size() == 3201);
  CHECK(seg.events[2999].values[1].u == 2999);
  CHECK(seg.events[3000].values[0].u == 10000);
  CHECK(seg.events[3199].values[1].u == 99);
}

TEST_CASE("format one writer produces several self-contained segments") {
  TempDir dir;
  FakeDescriber describer;
  SegmentWriter w;
  w.SetPcDescriber(&describer);
  uint32_t a = w.DefineEventType({"a", {{"time", FieldType::kTime, "ns"}, {"name", FieldType::kString, ""}}});
  std::string err;
  const uint64_t pcs[] = {0x400010};
  for (int seq = 0; seq < 3; seq++) {
    REQUIRE(w.Open(dir.File("s" + std::to_string(seq)), Header(seq), &err));
    // A type defined mid-process appears in the segments after it.
    uint32_t b = w.DefineEventType({"b", {{"time", FieldType::kTime, "ns"}, {"stack", FieldType::kStack, ""}}});
    CHECK(b == 2);  // stable: redefining the same spec returns the same id
    Value va[] = {Value::U(100u + seq), Value::Str("same")};
    Value vb[] = {Value::U(200u + seq), Value::Stack(pcs, 1)};
    w.Append(a, va, 2);
    w.Append(b, vb, 2);
    REQUIRE(w.Seal({}, &err));
  }
  CHECK(describer.calls == 3);  // once per segment: nothing is shared between files
  for (int seq = 0; seq < 3; seq++) {
    Segment seg = ReadSegmentFile(dir.File("s" + std::to_string(seq)));
    CHECK(seg.state == SegmentState::kSealed);
    CHECK(seg.problems.empty());
    CHECK(seg.header.sequence == static_cast<uint64_t>(seq));
    REQUIRE(seg.TypeByName("a"));
    REQUIRE(seg.TypeByName("b"));
    CHECK(seg.TypeByName("a")->id == a);
    auto ea = seg.EventsOf("a");
    auto eb = seg.EventsOf("b");
    REQUIRE(ea.size() == 1);
    REQUIRE(eb.size() == 1);
    CHECK(ea[0]->values[0].u == 100u + seq);
    CHECK(ea[0]->values[1].u == 1);  // string ids restart at 1 in every segment
    CHECK(*seg.String(1) == "same");
    const auto* st = seg.Stack(static_cast<uint32_t>(eb[0]->values[1].u));
    REQUIRE(st);
    REQUIRE(seg.LocationById((*st)[0]));
    CHECK(seg.LocationById((*st)[0])->address == 0x400010);
  }
}

namespace {

// Type ids defined by each SCHEMA block of an intact segment, in file order
// (the test's schemas are small: their blocks are stored plain).
std::vector<std::vector<uint64_t>> SchemaBlockIds(const std::vector<uint8_t>& d) {
  std::vector<std::vector<uint64_t>> out;
  BlockScanner s(d.data(), d.size(), static_cast<size_t>(LoadLE(d.data() + 12, 4)));
  std::vector<Problem> problems;
  RawBlock b;
  while (s.Next(&b, &problems)) {
    if (b.kind != static_cast<uint16_t>(BlockKind::kSchema)) continue;
    REQUIRE(b.flags == 0);
    ByteCursor c(b.payload, b.payload_len);
    uint64_t n = 0;
    REQUIRE(c.Uvarint(&n));
    std::vector<uint64_t> ids;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t id = 0, nfields = 0;
      std::string_view text;
      uint8_t code = 0;
      REQUIRE(c.Uvarint(&id));
      REQUIRE(c.Str(&text));
      REQUIRE(c.Uvarint(&nfields));
      for (uint64_t f = 0; f < nfields; f++) {
        REQUIRE(c.Str(&text));  // name
        REQUIRE(c.U8(&code));
        REQUIRE(c.Str(&text));  // unit
      }
      ids.push_back(id);
    }
    out.push_back(ids);
  }
  return out;
}

}  // namespace

TEST_CASE("format a segment defines only the types it has events of, each twice across writes") {
  TempDir dir;
  SegmentWriter w;
  const uint32_t early = w.DefineEventType({"early", {{"time", FieldType::kTime, "ns"}, {"n", FieldType::kUInt, ""}}});
  const uint32_t late = w.DefineEventType({"late", {{"time", FieldType::kTime, "ns"}, {"n", FieldType::kUInt, ""}}});
  const uint32_t never = w.DefineEventType({"never", {{"time", FieldType::kTime, "ns"}}});
  REQUIRE(never == 3);
  std::string err;
  Value v[] = {Value::U(100), Value::U(1)};

  SUBCASE("written three times: each type in two blocks, a type first seen at the seal after its events") {
    REQUIRE(w.Open(dir.File("s"), Header(), &err));
    w.Append(early, v, 2);
    REQUIRE(w.Flush(&err));  // write 1: early's first copy
    w.Append(early, v, 2);
    REQUIRE(w.Flush(&err));  // write 2: early's second copy
    w.Append(late, v, 2);
    REQUIRE(w.Seal({}, &err));  // late's first copy before its events, its second after them
    const std::vector<uint8_t> d = ReadAll(dir.File("s"));
    const auto blocks = SchemaBlockIds(d);
    REQUIRE(blocks.size() == 4);
    CHECK(blocks[0] == std::vector<uint64_t>{early});
    CHECK(blocks[1] == std::vector<uint64_t>{early});
    CHECK(blocks[2] == std::vector<uint64_t>{late});
    CHECK(blocks[3] == std::vector<uint64_t>{late});
    // The second copy of `late` follows its EVENTS block.
    const auto all = Blocks(d);
    size_t schemas = 0, late_events_at = 0, last_schema_at = 0;
    for (size_t i = 0; i < all.size(); i++) {
      if (all[i].kind == static_cast<uint16_t>(BlockKind::kSchema) && ++schemas == 4) last_schema_at = i;
      if (all[i].kind == static_cast<uint16_t>(BlockKind::kEvents)) late_events_at = i;
    }
    CHECK(late_events_at < last_schema_at);
    Segment seg = ReadSegmentFile(dir.File("s"));
    CHECK(seg.problems.empty());
    CHECK(seg.EventsOf("early").size() == 2);
    CHECK(seg.EventsOf("late").size() == 1);
    CHECK(seg.TypeByName("never") == nullptr);
  }
  SUBCASE("sealed at its first write: one copy") {
    REQUIRE(w.Open(dir.File("one"), Header(), &err));
    w.Append(late, v, 2);
    REQUIRE(w.Seal({}, &err));
    const auto blocks = SchemaBlockIds(ReadAll(dir.File("one")));
    REQUIRE(blocks.size() == 1);
    CHECK(blocks[0] == std::vector<uint64_t>{late});
  }
  SUBCASE("no events: no SCHEMA block at all") {
    REQUIRE(w.Open(dir.File("none"), Header(), &err));
    REQUIRE(w.Flush(&err));
    REQUIRE(w.Seal({}, &err));
    CHECK(SchemaBlockIds(ReadAll(dir.File("none"))).empty());
    CHECK(ReadSegmentFile(dir.File("none")).state == SegmentState::kSealed);
  }
}

TEST_CASE("format batches auto-flush and stay within the per-block limit") {
  TempDir dir;
  SegmentWriter w;
  uint32_t id = w.DefineEventType({"wide",
                                   {{"time", FieldType::kTime, "ns"},
                                    {"a", FieldType::kUInt, ""},
                                    {"b", FieldType::kUInt, ""},
                                    {"c", FieldType::kSInt, ""}}});
  std::string err;
  REQUIRE(w.Open(dir.File("big"), Header(), &err));
  const uint64_t n = 150'000;
  for (uint64_t i = 0; i < n; i++) {
    Value v[] = {Value::U(1'000'000 + i * 1000), Value::U(i), Value::U(i * 7919), Value::S(-static_cast<int64_t>(i))};
    w.Append(id, v, 4);
  }
  // Nothing explicitly flushed, yet most events are already on disk.
  CHECK(w.stats().events_written > 0);
  CHECK(w.stats().events_written < n);
  CHECK(w.buffered_bytes() < 300 * 1024);
  REQUIRE(w.Seal({}, &err));
  auto data = ReadAll(dir.File("big"));
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.problems.empty());
  REQUIRE(seg.events.size() == n);
  for (uint64_t i = 0; i < n; i += 9973) {
    CHECK(seg.events[i].values[0].u == 1'000'000 + i * 1000);
    CHECK(seg.events[i].values[2].u == i * 7919);
    CHECK(seg.events[i].values[3].s == -static_cast<int64_t>(i));
  }
  int event_blocks = 0;
  for (const auto& b : Blocks(data)) event_blocks += b.kind == static_cast<uint16_t>(BlockKind::kEvents);
  CHECK(event_blocks >= 3);
  CHECK(seg.FooterValue("events") == n);
}

TEST_CASE("format large intern tables split into several blocks") {
  TempDir dir;
  SegmentWriter w;
  uint32_t id = w.DefineEventType({"s", {{"time", FieldType::kTime, "ns"}, {"name", FieldType::kString, ""}}});
  std::string err;
  REQUIRE(w.Open(dir.File("strings"), Header(), &err));
  std::string big(1000, 'x');
  const int n = 2600;  // ~2.6 MB of distinct strings in one flush
  for (int i = 0; i < n; i++) {
    std::string s = big + std::to_string(i);
    Value v[] = {Value::U(i), Value::Str(s)};
    w.Append(id, v, 2);
  }
  // An over-long string is cut (at a UTF-8 boundary) rather than refused.
  std::string huge(70 * 1024, 'y');
  huge[64 * 1024 - 1] = '\xc3';  // a 2-byte sequence straddling the cut
  huge[64 * 1024] = '\xa9';
  Value hv[] = {Value::U(n), Value::Str(huge)};
  w.Append(id, hv, 2);
  REQUIRE(w.Seal({}, &err));
  auto data = ReadAll(dir.File("strings"));
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.problems.empty());
  int string_blocks = 0;
  for (const auto& b : Blocks(data)) string_blocks += b.kind == static_cast<uint16_t>(BlockKind::kStrings);
  CHECK(string_blocks >= 2);
  REQUIRE(seg.events.size() == n + 1);
  for (int i = 0; i < n; i += 97)
    CHECK(*seg.String(static_cast<uint32_t>(seg.events[i].values[1].u)) == big + std::to_string(i));
  const std::string* cut = seg.String(static_cast<uint32_t>(seg.events[n].values[1].u));
  REQUIRE(cut);
  CHECK(cut->size() == 64 * 1024 - 1);
  CHECK(cut->back() == 'y');
}

TEST_CASE("format writer refuses bad specs and counts rejected events") {
  TempDir dir;
  SegmentWriter w;
  CHECK(w.DefineEventType({"no.fields", {}}) == 0);
  CHECK(w.DefineEventType({"no.time", {{"x", FieldType::kUInt, ""}}}) == 0);
  CHECK(w.DefineEventType({"bad.code", {{"time", FieldType::kTime, "ns"}, {"x", static_cast<FieldType>(9), ""}}}) == 0);
  CHECK(w.DefineEventType({"not.named.time", {{"t", FieldType::kTime, "ns"}}}) == 0);
  CHECK(w.DefineEventType({"reserved", {{"time", FieldType::kTime, "ns"}, {"type", FieldType::kUInt, ""}}}) == 0);
  CHECK(w.DefineEventType(
            {"dup", {{"time", FieldType::kTime, "ns"}, {"a", FieldType::kUInt, ""}, {"a", FieldType::kSInt, ""}}}) ==
        0);
  uint32_t id = w.DefineEventType({"ok", {{"time", FieldType::kTime, "ns"}, {"x", FieldType::kUInt, ""}}});
  CHECK(id == 1);
  CHECK(w.DefineEventType({"ok", {{"time", FieldType::kTime, "ns"}, {"x", FieldType::kUInt, ""}}}) == id);
  CHECK(w.DefineEventType({"ok", {{"time", FieldType::kTime, "ns"}, {"x", FieldType::kSInt, ""}}}) == 0);
  std::string err;
  REQUIRE(w.Open(dir.File("r"), Header(), &err));
  Value v[] = {Value::U(1), Value::U(2)};
  w.Append(id, v, 1);  // wrong arity
  w.Append(0, v, 2);   // refused type
  w.Append(7, v, 2);   // undefined type
  w.Append(id, v, 2);
  REQUIRE(w.Seal({}, &err));
  Segment seg = ReadSegmentFile(dir.File("r"));
  CHECK(seg.events.size() == 1);
  CHECK(seg.FooterValue("writer.rejected") == 3u);
  CHECK(seg.FooterValue("events") == 1u);
}

namespace {
volatile sig_atomic_t g_xfsz_seen = 0;
void CountXfsz(int) { g_xfsz_seen = g_xfsz_seen + 1; }
}  // namespace

TEST_CASE("fsize guard: a write past RLIMIT_FSIZE fails with EFBIG and raises no SIGXFSZ") {
  // The race fsize_guard.h covers: the limit came down after the check.
  TempDir dir;
  const int fd = open(dir.File("f").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  struct rlimit old;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  g_xfsz_seen = 0;
  auto old_handler = signal(SIGXFSZ, CountXfsz);
  struct rlimit lim = old;
  lim.rlim_cur = 10;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  CHECK(flightrec::format::FileSizeLimit() == 10);
  CHECK_FALSE(flightrec::format::FileSizeAllows(11));
  const char bytes[32] = {};
  const ssize_t first = flightrec::format::WriteWithoutSigxfsz(fd, bytes, sizeof(bytes));  // short: up to the limit
  errno = 0;
  const ssize_t second = flightrec::format::WriteWithoutSigxfsz(fd, bytes, sizeof(bytes));
  const int second_errno = errno;
  const ssize_t third = flightrec::format::PwriteWithoutSigxfsz(fd, bytes, 4, 20);
  setrlimit(RLIMIT_FSIZE, &old);
  sigset_t pending;
  sigpending(&pending);
  const bool still_pending = sigismember(&pending, SIGXFSZ) == 1;
  signal(SIGXFSZ, old_handler);
  close(fd);
  CHECK(first == 10);
  CHECK(second == -1);
  CHECK(second_errno == EFBIG);
  CHECK(third == -1);
  CHECK(g_xfsz_seen == 0);
  CHECK_FALSE(still_pending);
}

TEST_CASE("format writer reports open and write errors without aborting") {
  TempDir dir;
  SegmentWriter w;
  uint32_t id = w.DefineEventType({"b", {{"time", FieldType::kTime, "ns"}, {"blob", FieldType::kBytes, ""}}});
  std::string err;
  CHECK_FALSE(w.Open(dir.File("missing/dir/x"), Header(), &err));
  CHECK(err.find("No such file") != std::string::npos);
  REQUIRE(w.Open(dir.File("exists"), Header(), &err));
  w.Abandon();
  SegmentWriter w2;
  CHECK_FALSE(w2.Open(dir.File("exists"), Header(), &err));  // O_EXCL: never clobber
  CHECK(err.find("File exists") != std::string::npos);
  CHECK_FALSE(w2.Flush(&err));  // nothing open
  std::string err_seal;
  CHECK_FALSE(w2.Seal({}, &err_seal));

  // A file-size limit (RLIMIT_FSIZE): the write that would pass it is not
  // made, and nothing raises SIGXFSZ (counted by a handler: its default
  // action would kill the program we run in; fsize_guard.h).
  REQUIRE(w.Open(dir.File("full"), Header(), &err));
  struct rlimit old;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  g_xfsz_seen = 0;
  auto old_handler = signal(SIGXFSZ, CountXfsz);
  struct rlimit lim = old;
  lim.rlim_cur = 4096;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  std::string payload(1000, 'z');
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 20; i++) {
    for (char& c : payload) {  // xorshift noise: incompressible
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<char>(x);
    }
    Value v[] = {Value::U(i), Value::Str(payload)};
    w.Append(id, v, 2);
  }
  bool flushed = w.Flush(&err);
  std::string seal_err;
  bool sealed = w.Seal({}, &seal_err);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  CHECK_FALSE(flushed);
  CHECK(err.find("RLIMIT_FSIZE") != std::string::npos);
  CHECK(g_xfsz_seen == 0);
  CHECK_FALSE(sealed);
  CHECK_FALSE(w.is_open());
  // What reached the disk is still a readable (truncated) segment.
  Segment seg = ReadSegmentFile(dir.File("full"));
  CHECK(seg.state != SegmentState::kInvalid);
  CHECK(seg.bad_blocks == 0);
  // The writer is reusable for the next segment.
  REQUIRE(w.Open(dir.File("after"), Header(1), &err));
  Value v[] = {Value::U(5), Value::Str("ok")};
  w.Append(id, v, 2);
  REQUIRE(w.Seal({}, &err));
  Segment after = ReadSegmentFile(dir.File("after"));
  CHECK(after.state == SegmentState::kSealed);
  CHECK(after.events.size() == 1);
}

TEST_CASE("format writer counts every event a failed write or a vanished file lost") {
  TempDir dir;
  SegmentWriter w;
  uint32_t id = w.DefineEventType({"b", {{"time", FieldType::kTime, "ns"}, {"blob", FieldType::kBytes, ""}}});
  uint32_t other = w.DefineEventType({"o", {{"time", FieldType::kTime, "ns"}}});
  std::string err;
  REQUIRE(w.Open(dir.File("full"), Header(), &err));
  for (int i = 0; i < 5; i++) {
    Value v[] = {Value::U(i), Value::Str("small")};
    w.Append(id, v, 2);
  }
  REQUIRE(w.Flush(&err));
  CHECK(w.TakeLostEvents().empty());

  // A full disk (RLIMIT_FSIZE, SIGXFSZ ignored -> EFBIG) in the middle of a write.
  struct rlimit old;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 8192;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  std::string payload(1000, 'z');
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 20; i++) {
    for (char& c : payload) {  // incompressible: the write passes the limit part way
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<char>(x);
    }
    Value v[] = {Value::U(100 + i), Value::Str(payload)};
    w.Append(id, v, 2);
  }
  Value o[] = {Value::U(7)};
  w.Append(other, o, 1);
  const bool flushed = w.Flush(&err);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  REQUIRE_FALSE(flushed);
  Value late[] = {Value::U(200), Value::Str("after the failure")};
  w.Append(id, late, 2);
  w.Abandon();
  using Lost = std::vector<std::pair<std::string, uint64_t>>;
  CHECK(w.TakeLostEvents() == Lost{{"b", 21}, {"o", 1}});
  CHECK(w.TakeLostEvents().empty());  // taken once
  // The file was cut back to its last whole write: exactly the 5 written events.
  Segment seg = ReadSegmentFile(dir.File("full"));
  CHECK(seg.bad_blocks == 0);
  CHECK(seg.events.size() == 5);
  CHECK(ReadAll(dir.File("full")).size() == w.stats().bytes_written);

  // A segment whose file vanished: its written and buffered events are lost.
  REQUIRE(w.Open(dir.File("gone"), Header(1), &err));
  for (int i = 0; i < 4; i++) w.Append(other, o, 1);
  REQUIRE(w.Flush(&err));
  w.Append(other, o, 1);
  w.LoseWrittenEvents();
  w.Abandon();
  CHECK(w.TakeLostEvents() == Lost{{"o", 5}});
}

namespace {

// Counts the writer's opens and closes, and can refuse opens with an errno
// (EMFILE: the program holds every descriptor).
struct CountingAccess : SegmentFileAccess {
  int opens = 0, closes = 0, open_now = 0, max_open = 0;
  int refuse = 0;  // errno to fail opens with; 0: open
  int Open(const std::string& name, int flags, unsigned mode) override {
    if (refuse) {
      errno = refuse;
      return -1;
    }
    const int fd = SegmentFileAccess::Open(name, flags, mode);
    if (fd >= 0) {
      opens++;
      max_open = std::max(max_open, ++open_now);
    }
    return fd;
  }
  void Close(int fd) override {
    closes++;
    open_now--;
    SegmentFileAccess::Close(fd);
  }
};

size_t OpenFdCount() {
  size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // the listing's own
}

}  // namespace

TEST_CASE("format writer holds no descriptor between writes") {
  TempDir dir;
  CountingAccess access;
  SegmentWriter w;
  w.SetFileAccess(&access);
  uint32_t id = w.DefineEventType({"b", {{"time", FieldType::kTime, "ns"}, {"blob", FieldType::kBytes, ""}}});
  const size_t before = OpenFdCount();
  std::string err;
  REQUIRE(w.Open(dir.File("a.active"), Header(), &err));
  CHECK(w.is_open());
  CHECK(w.fd() == -1);
  CHECK(OpenFdCount() == before);
  std::string big(200 * 1024, 'q');
  for (int i = 0; i < 10; i++) {  // auto-flushes of full batches, between the flushes
    Value v[] = {Value::U(i), Value::Str(big)};
    w.Append(id, v, 2);
    if (i % 3 == 0) REQUIRE(w.Flush(&err));
    CHECK(OpenFdCount() == before);
    CHECK(w.fd() == -1);
  }
  w.Touch();
  REQUIRE(w.Seal({}, &err));
  CHECK(OpenFdCount() == before);
  CHECK(access.opens > 4);  // header, auto-flushes, flushes, touch, footer
  CHECK(access.opens == access.closes);
  CHECK(access.max_open == 1);
  Segment seg = ReadSegmentFile(dir.File("a.active"));
  CHECK(seg.state == SegmentState::kSealed);
  CHECK(seg.events.size() == 10);
}

// A writer on a counting file access, with one type "o" (time, n), open on
// dir/name: the set-up of the tests that count the writer's file accesses.
struct CountedWriter {
  TempDir dir;
  CountingAccess access;
  SegmentWriter w;
  uint32_t id = 0;
  std::string err;
  explicit CountedWriter(const char* name) {
    w.SetFileAccess(&access);
    id = w.DefineEventType({"o", {{"time", FieldType::kTime, "ns"}, {"n", FieldType::kUInt, ""}}});
    REQUIRE(w.Open(dir.File(name), Header(), &err));
  }
};

TEST_CASE("format writer gathers full batches' blocks into one write per flush") {
  CountedWriter c("g.active");
  auto& [dir, access, w, id, err] = c;
  REQUIRE(access.opens == 1);  // the header
  // 16 bytes of columns per event: a batch is full (and sealed into a block)
  // every 16,384 events. These compress to a few hundred bytes a block.
  const uint64_t n = 16384 * 6;
  for (uint64_t i = 0; i < n; i++) {
    Value v[] = {Value::U(1000 + i), Value::U(i & 7)};
    w.Append(id, v, 2);
  }
  CHECK(w.stats().events_written == 0);  // six blocks, none written yet
  CHECK(access.opens == 1);
  REQUIRE(w.Flush(&err));
  CHECK(access.opens == 2);  // all of them in one write
  CHECK(w.stats().events_written == n);

  // Blocks that compress less (two random bytes an event: ~32 KiB a block)
  // reach the file before the flush once 64 KiB of them wait: every second
  // block, so what waits stays bounded.
  uint64_t x = 88172645463325252ull;
  for (uint64_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    Value v[] = {Value::U(2000000 + i), Value::U(x & 0xffff)};
    w.Append(id, v, 2);
  }
  CHECK(access.opens >= 2 + 2);
  CHECK(access.opens <= 2 + 3);
  CHECK(w.stats().events_written > n);
  REQUIRE(w.Seal({}, &err));
  Segment seg = ReadSegmentFile(dir.File("g.active"));
  CHECK(seg.state == SegmentState::kSealed);
  REQUIRE(seg.events.size() == 2 * n);
  CHECK(seg.events[5].values[1].u == 5);
  CHECK(seg.bad_blocks == 0);
}

TEST_CASE("format writer keeps its blocks while no descriptor is free, and writes them later") {
  CountedWriter c("d.active");
  auto& [dir, access, w, id, err] = c;
  const uint64_t header_bytes = w.stats().bytes_written;
  access.refuse = EMFILE;
  for (int i = 0; i < 100; i++) {
    Value v[] = {Value::U(i), Value::U(i * 3)};
    w.Append(id, v, 2);
    if (i % 10 == 9) CHECK(w.Flush(&err));  // not an error: the blocks wait
  }
  CHECK(w.write_deferred());
  CHECK(w.stats().bytes_written == header_bytes);
  CHECK(ReadAll(dir.File("d.active")).size() == header_bytes);
  access.refuse = 0;
  REQUIRE(w.Flush(&err));
  CHECK_FALSE(w.write_deferred());
  CHECK(w.TakeLostEvents().empty());
  REQUIRE(w.Seal({}, &err));
  Segment seg = ReadSegmentFile(dir.File("d.active"));
  CHECK(seg.state == SegmentState::kSealed);
  REQUIRE(seg.events.size() == 100);
  CHECK(seg.bad_blocks == 0);

  // A seal that finds no descriptor either fails, and counts what it held.
  REQUIRE(w.Open(dir.File("e.active"), Header(1), &err));
  access.refuse = EMFILE;
  for (int i = 0; i < 7; i++) {
    Value v[] = {Value::U(i), Value::U(i)};
    w.Append(id, v, 2);
  }
  REQUIRE(w.Flush(&err));
  CHECK_FALSE(w.Seal({}, &err));
  CHECK(err.find("Too many open files") != std::string::npos);
  using Lost = std::vector<std::pair<std::string, uint64_t>>;
  CHECK(w.TakeLostEvents() == Lost{{"o", 7}});
  access.refuse = 0;
}

TEST_CASE("format writer: a file removed between writes is reported as vanished") {
  TempDir dir;
  SegmentWriter w;
  uint32_t id = w.DefineEventType({"o", {{"time", FieldType::kTime, "ns"}}});
  std::string err;
  REQUIRE(w.Open(dir.File("v.active"), Header(), &err));
  Value v[] = {Value::U(1)};
  w.Append(id, v, 1);
  REQUIRE(w.Flush(&err));
  CHECK_FALSE(w.file_vanished());
  REQUIRE(unlink(dir.File("v.active").c_str()) == 0);
  w.Append(id, v, 1);
  CHECK_FALSE(w.Flush(&err));
  CHECK(w.file_vanished());
  CHECK(err.find("No such file") != std::string::npos);
  CHECK(access(dir.File("v.active").c_str(), F_OK) != 0);  // never created again by a write
  w.Abandon();
}

TEST_CASE("format header carries the writer identity, which readers may skip") {
  TempDir dir;
  SegmentWriter w;
  SegmentHeaderInfo h = Header(4);
  for (int i = 0; i < 16; i++) h.identity.boot_id[i] = static_cast<uint8_t>(i * 7 + 1);
  h.identity.pid_ns = 4026531836ull;
  h.identity.start_ticks = 123456789ull;
  std::string err;
  REQUIRE(w.Open(dir.File("i.active"), h, &err));
  REQUIRE(w.Seal({}, &err));
  Segment seg = ReadSegmentFile(dir.File("i.active"));
  CHECK(seg.state == SegmentState::kSealed);
  CHECK(seg.header.sequence == 4u);
  CHECK(seg.header.identity.pid_ns == h.identity.pid_ns);
  CHECK(seg.header.identity.start_ticks == h.identity.start_ticks);
  CHECK(std::memcmp(seg.header.identity.boot_id, h.identity.boot_id, 16) == 0);
  // Without one, the header is as before.
  REQUIRE(w.Open(dir.File("j.active"), Header(5), &err));
  REQUIRE(w.Seal({}, &err));
  Segment plain = ReadSegmentFile(dir.File("j.active"));
  CHECK(plain.header.header_len + 2 + kWriterIdentityBytes == seg.header.header_len);
  CHECK_FALSE(plain.header.identity.known());
}
