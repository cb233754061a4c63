// Unit tests for InternTables' provisional locations: a pc described without
// a name (its module could not be opened while the host held every fd) is
// described again once the describer's generation moves, and stacks appended
// afterwards refer to the better location; earlier events keep theirs.
// Also its per-field RecentStrings cache: the ids and string table entries
// it yields are the ones the hash lookup alone gives.
#include <doctest/doctest.h>

#include <map>
#include <utility>

#include "format/intern_tables.h"
#include "tests/unit/format_test_util.h"

using namespace format_test;

namespace {

// pcs in [0x400000, 0x500000) are in "/usr/bin/app". While starved the file
// cannot be read: mapping without build-id, no lines. Recovered: named,
// except pcs >= 0x480000 (no symbol covers them). pcs >= 0x900000 are in no
// mapping at all.
class RecoveringDescriber : public PcDescriber {
 public:
  bool starved = true;
  uint64_t generation = 1;
  std::map<uint64_t, int> calls;
  bool Describe(uint64_t pc, MappingInfo* m, std::vector<FrameLine>* lines) override {
    calls[pc]++;
    if (pc >= 0x900000) return false;
    m->start = 0x400000;
    m->end = 0x500000;
    m->path = "/usr/bin/app";
    if (starved) return true;
    m->build_id = "feed01";
    if (pc < 0x480000) lines->push_back({"fn_" + std::to_string(pc), "app.c", static_cast<uint32_t>(pc & 0xff)});
    return true;
  }
  uint64_t Generation() override { return generation; }
};

struct Trace {
  TempDir dir;
  RecoveringDescriber describer;
  SegmentWriter w;
  uint32_t type = 0;
  uint64_t time = 1'000'000'000;
  Trace() {
    w.SetPcDescriber(&describer);
    type = w.DefineEventType({"s", {{"time", FieldType::kTime, "ns"}, {"stack", FieldType::kStack, ""}}});
    std::string err;
    REQUIRE_MESSAGE(w.Open(dir.File("a.active"), Header(), &err), err);
  }
  void Sample(std::vector<uint64_t> pcs) {
    Value v[] = {Value::U(time++), Value::Stack(pcs.data(), static_cast<uint32_t>(pcs.size()))};
    w.Append(type, v, 2);
  }
  Segment Seal() {
    std::string err;
    REQUIRE_MESSAGE(w.Seal({}, &err), err);
    auto data = ReadAll(dir.File("a.active"));
    Segment seg = ReadSegment(data.data(), data.size());
    REQUIRE(seg.problems.empty());
    return seg;
  }
};

uint32_t StackOf(const Segment& seg, size_t event) { return static_cast<uint32_t>(seg.events.at(event).values[1].u); }

const Location& Frame(const Segment& seg, size_t event, size_t frame) {
  const auto* s = seg.Stack(StackOf(seg, event));
  REQUIRE(s);
  REQUIRE(frame < s->size());
  const Location* l = seg.LocationById((*s)[frame]);
  REQUIRE(l);
  return *l;
}

std::string FunctionOf(const Segment& seg, const Location& l) {
  if (l.lines.empty()) return "";
  const std::string* f = seg.String(l.lines.back().function);
  return f ? *f : "";
}

size_t LocationsAt(const Segment& seg, uint64_t address) {
  size_t n = 0;
  for (const auto& [id, l] : seg.locations) n += l.address == address;
  return n;
}

}  // namespace

TEST_CASE("format intern: a pc described unnamed gets its name once the describer recovers") {
  Trace t;
  t.Sample({0x400010, 0x400020});           // 0: starved
  t.Sample({0x400010, 0x400020});           // 1: same stack, same generation
  CHECK(t.describer.calls[0x400010] == 1);  // not asked again before the generation moves
  t.describer.starved = false;
  t.describer.generation = 2;
  t.Sample({0x400010, 0x400020});  // 2: the same stack after recovery
  t.Sample({0x400010, 0x400030});  // 3: a new stack through the same leaf pc
  t.Sample({0x400010, 0x400020});  // 4
  CHECK(t.describer.calls[0x400010] == 2);
  t.describer.generation = 3;      // a named location is final
  t.Sample({0x400010, 0x400040});  // 5
  CHECK(t.describer.calls[0x400010] == 2);
  Segment seg = t.Seal();
  REQUIRE(seg.events.size() == 6);

  // Events appended while starved keep the unnamed description.
  CHECK(StackOf(seg, 0) == StackOf(seg, 1));
  const Location& before = Frame(seg, 0, 0);
  CHECK(before.address == 0x400010);
  CHECK(before.lines.empty());
  const Mapping* m0 = seg.MappingById(before.mapping);
  REQUIRE(m0);
  CHECK(*seg.String(m0->path) == "/usr/bin/app");
  CHECK(m0->build_id == 0);

  // Events after it: a new stack id whose frames are named.
  CHECK(StackOf(seg, 2) != StackOf(seg, 0));
  CHECK(StackOf(seg, 4) == StackOf(seg, 2));
  CHECK(FunctionOf(seg, Frame(seg, 2, 0)) == "fn_" + std::to_string(0x400010));
  CHECK(FunctionOf(seg, Frame(seg, 2, 1)) == "fn_" + std::to_string(0x400020));
  const Mapping* m2 = seg.MappingById(Frame(seg, 2, 0).mapping);
  REQUIRE(m2);
  CHECK(*seg.String(m2->build_id) == "feed01");
  for (size_t e : {3u, 5u}) {
    CHECK(FunctionOf(seg, Frame(seg, e, 0)) == "fn_" + std::to_string(0x400010));
    CHECK(&Frame(seg, e, 0) == &Frame(seg, 2, 0));  // one resolved location, shared
  }
  CHECK(LocationsAt(seg, 0x400010) == 2);  // the unnamed one and the one that superseded it
}

TEST_CASE("format intern: a pc that stays unnamed keeps one location and its stack") {
  Trace t;
  t.Sample({0x900000, 0x480000, 0x400050});  // 0: starved
  t.describer.starved = false;
  t.describer.generation = 2;
  t.Sample({0x900000, 0x480000, 0x400050});  // 1: 0x480000 gains a build-id, 0x400050 a name
  t.describer.generation = 3;
  t.Sample({0x900000, 0x480000, 0x400050});  // 2: nothing new to say
  t.Sample({0x900000, 0x480000, 0x400050});  // 3
  // Unnamed pcs are asked once per generation, not once per event.
  CHECK(t.describer.calls[0x900000] == 3);
  CHECK(t.describer.calls[0x480000] == 3);
  CHECK(t.describer.calls[0x400050] == 2);
  Segment seg = t.Seal();
  REQUIRE(seg.events.size() == 4);
  CHECK(StackOf(seg, 1) != StackOf(seg, 0));
  CHECK(StackOf(seg, 2) == StackOf(seg, 1));
  CHECK(StackOf(seg, 3) == StackOf(seg, 1));
  CHECK(LocationsAt(seg, 0x900000) == 1);  // described the same way every time
  CHECK(LocationsAt(seg, 0x480000) == 2);  // without, then with its build-id
  CHECK(LocationsAt(seg, 0x400050) == 2);
  CHECK(Frame(seg, 0, 0).mapping == 0);
  CHECK(&Frame(seg, 1, 0) == &Frame(seg, 0, 0));
  CHECK(Frame(seg, 1, 1).lines.empty());
  const Mapping* m = seg.MappingById(Frame(seg, 1, 1).mapping);
  REQUIRE(m);
  CHECK(*seg.String(m->build_id) == "feed01");
  CHECK(FunctionOf(seg, Frame(seg, 1, 2)) == "fn_" + std::to_string(0x400050));
}

TEST_CASE("format intern: provisional state is per segment") {
  Trace t;
  t.Sample({0x400060});
  std::string err;
  REQUIRE_MESSAGE(t.w.Seal({}, &err), err);
  t.describer.starved = false;  // same generation: only a new segment asks again
  REQUIRE_MESSAGE(t.w.Open(t.dir.File("b.active"), Header(1), &err), err);
  t.Sample({0x400060});
  REQUIRE_MESSAGE(t.w.Seal({}, &err), err);
  CHECK(t.describer.calls[0x400060] == 2);
  auto data = ReadAll(t.dir.File("b.active"));
  Segment seg = ReadSegment(data.data(), data.size());
  REQUIRE(seg.problems.empty());
  REQUIRE(seg.events.size() == 1);
  CHECK(FunctionOf(seg, Frame(seg, 0, 0)) == "fn_" + std::to_string(0x400060));
  CHECK(seg.locations.size() == 1);
}

namespace {

// Every table payload the tables hand out, as (kind, bytes).
std::vector<std::pair<BlockKind, std::vector<uint8_t>>> Emitted(InternTables* t) {
  std::vector<std::pair<BlockKind, std::vector<uint8_t>>> out;
  t->EmitPending([&](BlockKind k, const uint8_t* p, size_t n) {
    out.emplace_back(k, std::vector<uint8_t>(p, p + n));
    return true;
  });
  return out;
}

}  // namespace

TEST_CASE("format intern: the recent-strings cache gives the ids and entries the hash gives") {
  InternTables cached, plain;
  RecentStrings recent;
  // More distinct values than the cache holds, repeats, the longest cached
  // length and one past it, and a string cut at kMaxValueBytes inside a
  // UTF-8 sequence (the cut backs off to the character boundary).
  const std::string edge(RecentStrings::kMaxBytes, 'e');
  const std::string past(RecentStrings::kMaxBytes + 1, 'e');
  const std::string huge = std::string(kMaxValueBytes - 1, 'h') + "\xc3\xa9tail";
  const std::vector<std::string> seq = {"read",  "write", "read", "",   "accept4", "close", "recv", "send", "read",
                                        "write", edge,    past,   edge, huge,      "read",  huge,   "close"};
  for (const std::string& s : seq) CHECK(cached.String(s, &recent) == plain.String(s));
  // A caller's buffer rewritten in place: the cache compares bytes, not pointers.
  char buf[8] = "read";
  const uint32_t read_id = plain.String("read");
  CHECK(cached.String(std::string_view(buf, 4), &recent) == read_id);
  std::memcpy(buf, "recv", 4);
  CHECK(cached.String(std::string_view(buf, 4), &recent) == plain.String("recv"));
  std::memcpy(buf, "reax", 4);  // same length, new value
  CHECK(cached.String(std::string_view(buf, 4), &recent) == plain.String("reax"));
  CHECK(cached.String(std::string_view(buf, 3), &recent) == plain.String("rea"));  // a prefix
  CHECK(cached.String("read", &recent) == read_id);
  CHECK(Emitted(&cached) == Emitted(&plain));  // same entries, long ones cut the same way
}

TEST_CASE("format intern: the recent-strings cache forgets its ids when the tables reset") {
  InternTables t;
  RecentStrings recent;
  CHECK(t.String("read", &recent) == 1);
  CHECK(t.String("write", &recent) == 2);
  Emitted(&t);
  t.Reset();  // a new segment: ids restart, the strings must be written again
  CHECK(t.String("write", &recent) == 1);
  CHECK(t.String("write", &recent) == 1);
  CHECK(t.String("read", &recent) == 2);
  auto emitted = Emitted(&t);
  REQUIRE(emitted.size() == 1);
  CHECK(emitted[0].first == BlockKind::kStrings);
  // first id 1, two entries: "write", "read"
  const std::vector<uint8_t> want = {1, 2, 5, 'w', 'r', 'i', 't', 'e', 4, 'r', 'e', 'a', 'd'};
  CHECK(emitted[0].second == want);
}

TEST_CASE("format intern: string fields read back right in every segment of one writer") {
  TempDir dir;
  SegmentWriter w;
  const uint32_t type = w.DefineEventType(
      {"op", {{"time", FieldType::kTime, "ns"}, {"op", FieldType::kString, ""}, {"role", FieldType::kString, ""}}});
  std::string err;
  // The second segment starts with the value that had id 2 in the first.
  const std::vector<std::vector<std::string>> ops = {{"read", "write", "read", "write"}, {"write", "close", "read"}};
  std::string buf;  // one buffer reused for every value, as callers may
  uint64_t time = 1'000'000'000;
  for (size_t seg = 0; seg < ops.size(); seg++) {
    REQUIRE_MESSAGE(w.Open(dir.File("s" + std::to_string(seg)), Header(seg), &err), err);
    for (const std::string& op : ops[seg]) {
      buf = op;
      Value v[] = {Value::U(time++), Value::Str(buf), Value::Str(seg ? "client" : "server")};
      w.Append(type, v, 3);
    }
    REQUIRE_MESSAGE(w.Seal({}, &err), err);
  }
  for (size_t seg = 0; seg < ops.size(); seg++) {
    Segment s = ReadSegmentFile(dir.File("s" + std::to_string(seg)));
    REQUIRE(s.problems.empty());
    auto events = s.EventsOf("op");
    REQUIRE(events.size() == ops[seg].size());
    for (size_t i = 0; i < events.size(); i++) {
      const std::string* op = s.String(static_cast<uint32_t>(events[i]->values[1].u));
      const std::string* role = s.String(static_cast<uint32_t>(events[i]->values[2].u));
      REQUIRE(op);
      REQUIRE(role);
      CHECK(*op == ops[seg][i]);
      CHECK(*role == (seg ? "client" : "server"));
    }
  }
}

namespace {
// Worlds: Describe names pc after the current world ("now_<world>"); an
// event older than world_start is described for its era ("era_<era>"):
// era 0 before time 500, era 1 from 500 on.
class WorldDescriber : public PcDescriber {
 public:
  uint64_t world = 0, world_start = 0;
  int now_calls = 0, before_calls = 0;
  bool Describe(uint64_t, MappingInfo* m, std::vector<FrameLine>* lines) override {
    now_calls++;
    return Fill("/usr/lib/now.so", "now_" + std::to_string(world), m, lines);
  }
  uint64_t WorldStart() override { return world_start; }
  uint64_t EraBefore(uint64_t time_ns) override { return time_ns < 500 ? 0 : 1; }
  bool DescribeBefore(uint64_t, uint64_t era, MappingInfo* m, std::vector<FrameLine>* lines) override {
    before_calls++;
    return Fill("/usr/lib/gone.so", "era_" + std::to_string(era), m, lines);
  }

 private:
  // Every pc: one mapping at 0x400000 of `path`, one frame named `function`.
  static bool Fill(const char* path, const std::string& function, MappingInfo* m, std::vector<FrameLine>* lines) {
    m->start = 0x400000;
    m->end = 0x500000;
    m->path = path;
    lines->push_back({function, "", 0});
    return true;
  }
};

// A segment of events (time, stack of the same two pcs) written through a
// describer: the world tests' writer.
struct SampleWriter {
  explicit SampleWriter(PcDescriber* d) {
    w.SetPcDescriber(d);
    type = w.DefineEventType({"s", {{"time", FieldType::kTime, "ns"}, {"stack", FieldType::kStack, ""}}});
    std::string err;
    REQUIRE_MESSAGE(w.Open(dir.File("a.active"), Header(), &err), err);
  }
  void Sample(uint64_t time) {
    static const uint64_t kPcs[] = {0x400010, 0x400020};
    Value v[] = {Value::U(time), Value::Stack(kPcs, 2)};
    w.Append(type, v, 2);
  }
  Segment Seal() {
    std::string err;
    REQUIRE_MESSAGE(w.Seal({}, &err), err);
    data = ReadAll(dir.File("a.active"));
    return ReadSegment(data.data(), data.size());
  }
  TempDir dir;
  SegmentWriter w;
  uint32_t type = 0;
  std::vector<uint8_t> data;  // the segment read back (its views point here)
};
}  // namespace

TEST_CASE("format intern: after an unload, pcs are described afresh and older events as of their era") {
  WorldDescriber d;
  SampleWriter sw(&d);
  auto sample = [&](uint64_t time) { sw.Sample(time); };
  sample(100);  // 0: the first world
  sample(200);  // 1: cached
  CHECK(d.now_calls == 2);
  d.world = 1;
  d.world_start = 1000;  // a library was unloaded at 1000
  sample(2000);          // 2: described afresh, not the first world's cached answer
  CHECK(d.now_calls == 4);
  sample(100);  // 3: older than the unload: era 0
  sample(600);  // 4: era 1
  sample(150);  // 5: era 0 again: cached
  CHECK(d.before_calls == 4);
  sample(3000);  // 6: the current world's cached answer
  CHECK(d.now_calls == 4);
  Segment seg = sw.Seal();
  REQUIRE(seg.problems.empty());
  REQUIRE(seg.events.size() == 7);
  auto leaf = [&](size_t e) { return FunctionOf(seg, Frame(seg, e, 0)); };
  CHECK(leaf(0) == "now_0");
  CHECK(StackOf(seg, 1) == StackOf(seg, 0));
  CHECK(leaf(2) == "now_1");
  CHECK(leaf(3) == "era_0");
  CHECK(leaf(4) == "era_1");
  CHECK(StackOf(seg, 5) == StackOf(seg, 3));
  CHECK(StackOf(seg, 4) != StackOf(seg, 3));
  CHECK(StackOf(seg, 6) == StackOf(seg, 2));
  CHECK(*seg.String(seg.MappingById(Frame(seg, 3, 0).mapping)->path) == "/usr/lib/gone.so");
}

TEST_CASE("format intern: a library unloaded while a stack is described has it described again as of its era") {
  // The describer learns of an unload (at 1000) only after it described a
  // pc of an event at 100 as the code there now ("now_1": what the loader put
  // at the address since). The stack must be described again, as of era 0.
  struct RacingDescriber : WorldDescriber {
    bool Describe(uint64_t pc, MappingInfo* m, std::vector<FrameLine>* lines) override {
      if (world == 0) {
        world = 1;
        world_start = 1000;
      }
      return WorldDescriber::Describe(pc, m, lines);
    }
  } d;
  SampleWriter sw(&d);
  auto sample = [&](uint64_t time) { sw.Sample(time); };
  sample(100);   // 0: described now, the world moved meanwhile: again as of era 0
  sample(2000);  // 1: the current world, described afresh (not the answers of event 0's first try)
  CHECK(d.before_calls == 2);
  Segment seg = sw.Seal();
  REQUIRE(seg.problems.empty());
  REQUIRE(seg.events.size() == 2);
  CHECK(FunctionOf(seg, Frame(seg, 0, 0)) == "era_0");
  CHECK(FunctionOf(seg, Frame(seg, 0, 1)) == "era_0");
  CHECK(*seg.String(seg.MappingById(Frame(seg, 0, 0).mapping)->path) == "/usr/lib/gone.so");
  CHECK(FunctionOf(seg, Frame(seg, 1, 0)) == "now_1");
}
