// Unit tests for the C++ segment reader on damaged input: bad CRCs, cuts at
// every byte offset, unknown kinds, corrupt lengths, bad headers, lost
// tables, random mutations (a short in-process fuzz), and hostile input:
// value and frame bombs, walls of false sync words, FIFOs and devices.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <random>

#include "format/column_encoder.h"
#include "format/crc32c.h"
#include "tests/unit/format_test_util.h"

using namespace format_test;

namespace {

// A segment written in `batches` flushes, each producing exactly one EVENTS
// block of `per_batch` events (plus table blocks for its new strings).
// Records the file size and event total after each flush.
struct Sample {
  std::vector<uint8_t> data;
  std::vector<uint64_t> flush_end;     // file size after flush i
  std::vector<uint64_t> events_after;  // events written after flush i
  uint64_t header_len = 0;
};

Sample WriteSample(const TempDir& dir, int batches = 4, int per_batch = 5, bool seal = true) {
  Sample s;
  SegmentWriter w;
  FakeDescriber describer;
  w.SetPcDescriber(&describer);
  uint32_t id = w.DefineEventType({"tick",
                                   {{"time", FieldType::kTime, "ns"},
                                    {"name", FieldType::kString, ""},
                                    {"stack", FieldType::kStack, ""},
                                    {"n", FieldType::kSInt, ""}}});
  std::string err, path = dir.File("sample");
  REQUIRE(w.Open(path, Header(), &err));
  s.header_len = w.stats().bytes_written;
  for (int b = 0; b < batches; b++) {
    for (int i = 0; i < per_batch; i++) {
      uint64_t pcs[] = {0x400100u + static_cast<uint64_t>(b) * 16, 0x400001};
      std::string name = "batch-" + std::to_string(b);
      Value v[] = {Value::U(1000u + b * 100 + i), Value::Str(name), Value::Stack(pcs, 2), Value::S(-i)};
      w.Append(id, v, 4);
    }
    REQUIRE(w.Flush(&err));
    s.flush_end.push_back(w.stats().bytes_written);
    s.events_after.push_back(w.stats().events_written);
  }
  if (seal) REQUIRE(w.Seal({{"dropped.x", 1}}, &err));
  else w.Abandon();
  s.data = ReadAll(path);
  return s;
}

// Frames a block by hand (SPEC.md 4.1), uncompressed.
std::vector<uint8_t> Frame(uint16_t kind, uint16_t flags, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> b(20);
  StoreLE32(b.data(), kBlockSync);
  StoreLE32(b.data() + 4, static_cast<uint32_t>(payload.size()));
  StoreLE16(b.data() + 8, kind);
  StoreLE16(b.data() + 10, flags);
  StoreLE32(b.data() + 12, static_cast<uint32_t>(payload.size()));
  uint32_t crc = Crc32c(Crc32c(0, b.data() + 4, 12), payload.data(), payload.size());
  StoreLE32(b.data() + 16, crc);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

std::vector<BlockInfo> EventBlocks(const std::vector<uint8_t>& d) {
  std::vector<BlockInfo> out;
  for (const auto& b : Blocks(d))
    if (b.kind == static_cast<uint16_t>(BlockKind::kEvents)) out.push_back(b);
  return out;
}

bool HasProblem(const Segment& s, const std::string& needle) {
  for (const auto& p : s.problems)
    if (p.message.find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("format bad CRC is detected and the following blocks are still read") {
  TempDir dir;
  Sample s = WriteSample(dir);
  auto ev = EventBlocks(s.data);
  REQUIRE(ev.size() == 4);
  auto data = s.data;
  data[ev[1].offset + 25] ^= 0x40;  // inside the second EVENTS block's payload
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.state == SegmentState::kSealed);  // the footer after it still counts
  CHECK(seg.bad_blocks == 1);
  CHECK(HasProblem(seg, "bad CRC at offset " + std::to_string(ev[1].offset)));
  REQUIRE(seg.events.size() == 15);
  // Batches 0, 2 and 3 are intact, with their strings and stacks.
  CHECK(*seg.String(static_cast<uint32_t>(seg.events[0].values[1].u)) == "batch-0");
  CHECK(*seg.String(static_cast<uint32_t>(seg.events[5].values[1].u)) == "batch-2");
  CHECK(seg.events[14].values[0].u == 1304);
  CHECK(seg.Stack(static_cast<uint32_t>(seg.events[14].values[2].u)) != nullptr);
}

TEST_CASE("format truncation at every byte offset keeps every whole block before the cut") {
  TempDir dir;
  Sample s = WriteSample(dir, 3, 4);
  const auto& full = s.data;
  auto blocks = Blocks(full);
  REQUIRE(blocks.size() >= 8);
  for (size_t cut = 0; cut <= full.size(); cut++) {
    CAPTURE(cut);
    Segment seg = ReadSegment(full.data(), cut);  // the reader must not look past `cut`
    uint64_t expect_events = 0;
    for (size_t i = 0; i < s.flush_end.size(); i++)
      if (s.flush_end[i] <= cut) expect_events = s.events_after[i];
    if (cut == 0) {
      CHECK(seg.state == SegmentState::kInvalid);
      continue;
    }
    if (cut < s.header_len) {
      CHECK(seg.state == SegmentState::kTruncated);
      CHECK(seg.events.empty());
      continue;
    }
    REQUIRE(seg.events.size() == expect_events);
    CHECK(seg.bad_blocks == 0);
    CHECK(seg.problems.empty());  // a cut is silent: it is how crashes look
    bool at_boundary = cut == s.header_len;
    for (const auto& b : blocks) at_boundary |= b.end == cut;
    if (cut == full.size()) {
      CHECK(seg.state == SegmentState::kSealed);
    } else if (at_boundary) {
      CHECK(seg.state == SegmentState::kActive);
    } else {
      CHECK(seg.state == SegmentState::kTruncated);
      CHECK(seg.truncated_at <= cut);
    }
    // Events read are exactly the first ones written.
    for (size_t i = 0; i < seg.events.size(); i++) CHECK(seg.events[i].values[0].u == 1000 + (i / 4) * 100 + i % 4);
  }
}

TEST_CASE("format unknown block kinds and unsupported flags are skipped") {
  TempDir dir;
  Sample s = WriteSample(dir);
  auto blocks = Blocks(s.data);
  auto data = s.data;
  auto unknown = Frame(99, 0, {1, 2, 3, 4, 5});
  auto flagged = Frame(static_cast<uint16_t>(BlockKind::kStrings), 0x8000, {1, 1, 0});
  size_t at = blocks[1].offset;
  data.insert(data.begin() + at, flagged.begin(), flagged.end());
  data.insert(data.begin() + at, unknown.begin(), unknown.end());
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.state == SegmentState::kSealed);
  CHECK(seg.unknown_blocks == 2);
  CHECK(seg.bad_blocks == 0);
  CHECK(seg.events.size() == 20);
  CHECK(HasProblem(seg, "unknown kind 99"));
}

TEST_CASE("format reader resynchronises after a corrupt block length") {
  TempDir dir;
  Sample s = WriteSample(dir);
  auto ev = EventBlocks(s.data);
  REQUIRE(ev.size() == 4);
  const uint32_t lengths[] = {
      0x7fffffffu,                           // impossible (> 64 MiB)
      static_cast<uint32_t>(s.data.size()),  // runs past end of file
      5,                                     // plausible but wrong: CRC fails
  };
  for (uint32_t len : lengths) {
    CAPTURE(len);
    auto data = s.data;
    StoreLE32(data.data() + ev[1].offset + 4, len);
    Segment seg = ReadSegment(data.data(), data.size());
    CHECK(seg.state == SegmentState::kSealed);  // not mistaken for a truncation
    CHECK(seg.bad_blocks == 1);
    CHECK(HasProblem(seg, "offset " + std::to_string(ev[1].offset)));
    CHECK(HasProblem(seg, "skipped"));
    CHECK(seg.events.size() == 15);
  }
  // Garbage between blocks is skipped too.
  auto data = s.data;
  std::vector<uint8_t> junk(100, 0xAB);
  data.insert(data.begin() + ev[2].offset, junk.begin(), junk.end());
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.events.size() == 20);
  CHECK(HasProblem(seg, "skipped 100 bytes"));
}

TEST_CASE("format header problems are reported, not crashed on") {
  const std::string text = "this is not a segment at all, just some text\n";
  Segment a = ReadSegment(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  CHECK(a.state == SegmentState::kInvalid);
  CHECK(a.error.find("not a flightrec segment") != std::string::npos);

  TempDir dir;
  Sample s = WriteSample(dir, 1, 1);
  auto v = s.data;
  StoreLE16(v.data() + 8, 2);
  Segment b = ReadSegment(v.data(), v.size());
  CHECK(b.state == SegmentState::kInvalid);
  CHECK(b.error.find("unsupported framing version 2") != std::string::npos);

  auto c = s.data;
  c[20] ^= 1;  // reserved field, covered by the CRC
  Segment cs = ReadSegment(c.data(), c.size());
  CHECK(cs.state == SegmentState::kInvalid);
  CHECK(cs.error == "bad header CRC");

  auto d = s.data;
  StoreLE32(d.data() + 12, 1u << 30);
  CHECK(ReadSegment(d.data(), d.size()).error.find("header_len") != std::string::npos);

  Segment missing = ReadSegmentFile(dir.File("does-not-exist"));
  CHECK(missing.state == SegmentState::kInvalid);
  CHECK(missing.error.find("No such file") != std::string::npos);
}

TEST_CASE("format lost table and schema blocks leave ids unresolved, not a failure") {
  TempDir dir;
  Sample s = WriteSample(dir);
  auto blocks = Blocks(s.data);
  // The first STRINGS block: batch-0's strings are lost, later ones are placed
  // by their first_id.
  const BlockInfo* strings = nullptr;
  const BlockInfo* schema = nullptr;
  for (const auto& b : blocks) {
    if (!strings && b.kind == static_cast<uint16_t>(BlockKind::kStrings)) strings = &b;
    if (!schema && b.kind == static_cast<uint16_t>(BlockKind::kSchema)) schema = &b;
  }
  REQUIRE(strings);
  REQUIRE(schema);
  auto data = s.data;
  data[strings->offset + 22] ^= 0xff;
  Segment seg = ReadSegment(data.data(), data.size());
  REQUIRE(seg.events.size() == 20);
  CHECK(seg.String(static_cast<uint32_t>(seg.events[0].values[1].u)) == nullptr);
  REQUIRE(seg.String(static_cast<uint32_t>(seg.events[19].values[1].u)));
  CHECK(*seg.String(static_cast<uint32_t>(seg.events[19].values[1].u)) == "batch-3");

  // The first SCHEMA block lost: the writer defines each type again at its
  // next write (SPEC.md 5.3), so only the first batch is undecodable.
  auto d2 = s.data;
  d2[schema->offset + 21] ^= 0xff;
  Segment noschema = ReadSegment(d2.data(), d2.size());
  CHECK(noschema.events.size() == 15);
  CHECK(noschema.events_skipped == 5);
  CHECK(HasProblem(noschema, "undefined type 1"));
}

TEST_CASE("format a type whose field 0 is not a time is ignored, the rest of its block kept") {
  TempDir dir;
  Sample s = WriteSample(dir, 1, 2, false);
  std::vector<uint8_t> payload;
  PutUvarint(&payload, 2);
  PutUvarint(&payload, 7);  // bad: field 0 is a uint
  PutStr(&payload, "no.time");
  PutUvarint(&payload, 1);
  PutStr(&payload, "x");
  payload.push_back(static_cast<uint8_t>(FieldType::kUInt));
  PutStr(&payload, "");
  PutUvarint(&payload, 8);  // good
  PutStr(&payload, "ok.type");
  PutUvarint(&payload, 1);
  PutStr(&payload, "time");
  payload.push_back(static_cast<uint8_t>(FieldType::kTime));
  PutStr(&payload, "ns");
  auto data = s.data;
  auto b = Frame(static_cast<uint16_t>(BlockKind::kSchema), 0, payload);
  data.insert(data.end(), b.begin(), b.end());
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.TypeByName("no.time") == nullptr);
  CHECK(seg.TypeByName("ok.type") != nullptr);
  CHECK(HasProblem(seg, "field 0 is not a time"));
  CHECK(seg.events.size() == 2);
}

TEST_CASE("format blocks after the footer are read and reported") {
  TempDir dir;
  Sample s = WriteSample(dir);
  auto data = s.data;
  std::vector<uint8_t> payload;
  PutUvarint(&payload, 1000);  // first_id far past the current table
  PutUvarint(&payload, 1);
  PutStr(&payload, "late");
  auto late = Frame(static_cast<uint16_t>(BlockKind::kStrings), 0, payload);
  data.insert(data.end(), late.begin(), late.end());
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.state == SegmentState::kSealed);
  CHECK(HasProblem(seg, "after the footer"));
  REQUIRE(seg.String(1000));
  CHECK(*seg.String(1000) == "late");
}

TEST_CASE("format event limit bounds what a hostile file can make the reader decode") {
  // Tiny blocks declaring many events with zero-width columns.
  TempDir dir;
  Sample s = WriteSample(dir, 1, 1, false);
  auto block = [](uint64_t count) {
    std::vector<uint8_t> payload;
    PutUvarint(&payload, 1);
    PutUvarint(&payload, count);
    payload.push_back(ColumnEncoding(ColumnScheme::kDelta, 0));
    for (int i = 0; i < 8; i++) payload.push_back(0);
    for (int f = 0; f < 3; f++) payload.push_back(ColumnEncoding(ColumnScheme::kPlain, 0));
    return Frame(static_cast<uint16_t>(BlockKind::kEvents), 0, payload);
  };
  std::vector<uint8_t> data = s.data;
  auto over = block((1u << 20) + 1);  // more than any block may hold
  data.insert(data.end(), over.begin(), over.end());
  // 16384 events x 4 fields: within what a 15-byte block may declare (65536
  // values + 64 per byte, SPEC.md 4.3).
  for (int i = 0; i < 3; i++) {
    auto b = block(1u << 14);
    data.insert(data.end(), b.begin(), b.end());
  }
  ReaderOptions opt;
  opt.max_events = 1 + (1u << 14);
  Segment seg = ReadSegment(data.data(), data.size(), opt);
  CHECK(seg.bad_blocks == 1);
  CHECK(HasProblem(seg, "bad event count"));
  CHECK(seg.events.size() == 1 + (1u << 14));  // the first big block fits the limit
  CHECK(seg.events_skipped == 2 * (1u << 14));
  CHECK(HasProblem(seg, "event limit reached"));
}

TEST_CASE("format reader survives random damage") {
  TempDir dir;
  Sample s = WriteSample(dir, 4, 20);
  std::mt19937 rng(12345);
  ReaderOptions opt;
  opt.max_events = 10000;
  for (int iter = 0; iter < 3000; iter++) {
    auto data = s.data;
    int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; k++) data[rng() % data.size()] = static_cast<uint8_t>(rng());
    if (rng() % 3 == 0) data.resize(rng() % data.size());
    // Half the time repair every CRC so the payload parsers see the damage.
    if (iter % 2 && data.size() > s.header_len) {
      StoreLE32(data.data() + s.header_len - 4, Crc32c(0, data.data(), s.header_len - 4));
      size_t p = s.header_len;
      while (p + 20 <= data.size()) {
        uint32_t len = static_cast<uint32_t>(LoadLE(data.data() + p + 4, 4));
        if (len > data.size() - p - 20) break;
        uint32_t crc = Crc32c(Crc32c(0, data.data() + p + 4, 12), data.data() + p + 20, len);
        StoreLE32(data.data() + p + 16, crc);
        p += 20 + len;
      }
    }
    Segment seg = ReadSegment(data.data(), data.size(), opt);
    CHECK(seg.events.size() <= opt.max_events);
    for (const Event& e : seg.events) {
      auto it = seg.schema.find(e.type_id);
      REQUIRE(it != seg.schema.end());
      CHECK(e.values.size() == it->second.fields.size());
    }
  }
}

TEST_CASE("format a block may not declare more values than its bytes allow") {
  // 1M events x 4 zero-width columns in 15 bytes: refused as bad, without
  // decoding; the next blocks are still read.
  TempDir dir;
  Sample s = WriteSample(dir, 1, 1, false);
  std::vector<uint8_t> payload;
  PutUvarint(&payload, 1);
  PutUvarint(&payload, 1u << 20);
  payload.push_back(ColumnEncoding(ColumnScheme::kDelta, 0));
  for (int i = 0; i < 8; i++) payload.push_back(0);
  for (int f = 0; f < 3; f++) payload.push_back(ColumnEncoding(ColumnScheme::kPlain, 0));
  auto bomb = Frame(static_cast<uint16_t>(BlockKind::kEvents), 0, payload);
  auto data = s.data;
  for (int i = 0; i < 3; i++) data.insert(data.end(), bomb.begin(), bomb.end());
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.bad_blocks == 3);
  CHECK(HasProblem(seg, "more values"));
  CHECK(seg.events.size() == 1);
}

TEST_CASE("format a stack deeper than 4096 frames is cut, the rest of its block kept") {
  TempDir dir;
  Sample s = WriteSample(dir, 1, 1, false);
  std::vector<uint8_t> payload;
  PutUvarint(&payload, 1000);  // first id, clear of the sample's stacks
  PutUvarint(&payload, 2);
  PutUvarint(&payload, 5000);
  for (int i = 0; i < 5000; i++) PutUvarint(&payload, 1 + i % 3);
  PutUvarint(&payload, 2);
  PutUvarint(&payload, 1);
  PutUvarint(&payload, 2);
  auto stacks = Frame(static_cast<uint16_t>(BlockKind::kStacks), 0, payload);
  auto data = s.data;
  data.insert(data.end(), stacks.begin(), stacks.end());
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.bad_blocks == 0);
  REQUIRE(seg.Stack(1000));
  CHECK(seg.Stack(1000)->size() == 4096);
  CHECK((*seg.Stack(1000))[4095] == 1 + 4095 % 3);
  REQUIRE(seg.Stack(1001));
  CHECK(seg.Stack(1001)->size() == 2);
  CHECK(HasProblem(seg, "1 stacks deeper than 4096 frames"));
}

TEST_CASE("format resynchronisation through a wall of false sync words finds the next good block") {
  // After a bad block, 64 KiB of block headers that pass every check but the
  // CRC, each declaring a payload to the end of the wall, then the rest of the
  // segment: every later block is found (their CRCs come from prefix
  // registers, checked here against the real blocks).
  TempDir dir;
  Sample s = WriteSample(dir);
  auto ev = EventBlocks(s.data);
  size_t cut = ev[1].offset;  // the wall goes before the second EVENTS block
  std::vector<uint8_t> wall;
  size_t n = (64u << 10) / 20;
  for (size_t i = 0; i < n; i++) {
    uint8_t h[20];
    uint32_t len = static_cast<uint32_t>((n - i - 1) * 20);
    StoreLE32(h, kBlockSync);
    StoreLE32(h + 4, len);
    StoreLE16(h + 8, static_cast<uint16_t>(BlockKind::kStrings));
    StoreLE16(h + 10, 0);
    StoreLE32(h + 12, len);
    StoreLE32(h + 16, 0xdeadbeef);
    wall.insert(wall.end(), h, h + 20);
  }
  auto data = s.data;
  data.insert(data.begin() + static_cast<long>(cut), wall.begin(), wall.end());
  Segment seg = ReadSegment(data.data(), data.size());
  CHECK(seg.state == SegmentState::kSealed);
  CHECK(seg.bad_blocks == 1);
  CHECK(seg.events.size() == 20);
  CHECK(HasProblem(seg, "skipped " + std::to_string(wall.size()) + " bytes"));
}

TEST_CASE("format ReadSegmentFile refuses FIFOs and devices without blocking") {
  TempDir dir;
  std::string fifo = dir.File("fifo.seg");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    Segment seg = ReadSegmentFile(path);
    CHECK(seg.state == SegmentState::kInvalid);
    CHECK(seg.error.find("not a regular file") != std::string::npos);
  }
}
