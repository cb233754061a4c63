// Drop ledger tests (preload/flush/drop_ledger.h): produced = recorded +
// dropped, per kind, across segment rotation, a failed write, a file removed
// under us, a paused output, fork and exit. Producers are played by the test
// (it knows what it produced); the segments are written by the real
// SegmentWriter and read back by the C++ reader, so "recorded" and "dropped"
// are what a reader of the directory finds: events of the kind's type, and
// recorder.dropped events naming the kind.
#include <doctest/doctest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format_test_util.h"
#include "preload/flush/drop_ledger.h"

using namespace flightrec;
using format_test::TempDir;

namespace {

constexpr uint16_t kKindA = 1, kKindB = 2;

const char* KindName(uint16_t kind) {
  if (kind == kKindA) return "k.a";
  if (kind == kKindB) return "k.b";
  return "unknown";
}

// One process as the flush thread sees it: one producer thread's drop
// counters beside its ring, the writer, the ledger, and the truth the test
// keeps (what was produced, per kind).
struct Process {
  explicit Process(const std::string& dir, const std::string& name) : dir_(dir), name_(name) {
    for (auto& d : dropped) d.store(0);
    for (auto& r : reported) r = 0;
    type[kKindA] =
        w.DefineEventType({"k.a", {{"time", format::FieldType::kTime, "ns"}, {"blob", format::FieldType::kBytes, ""}}});
    type[kKindB] = w.DefineEventType({"k.b", {{"time", format::FieldType::kTime, "ns"}}});
    ledger.SetEventType(w.DefineEventType(DropLedger::EventSpec()));
  }

  // A producer pushes n records: a full ring drops them (counted beside the
  // ring); otherwise the drain decodes them, or discards them when no
  // segment is open.
  void Produce(uint16_t kind, int n, bool ring_full, size_t blob_bytes = 8) {
    produced[KindName(kind)] += static_cast<uint64_t>(n);
    if (ring_full) {
      dropped[kind].fetch_add(static_cast<uint64_t>(n));
      return;
    }
    for (int i = 0; i < n; i++) {
      if (!w.is_open()) {
        ledger.Discarded(kind);
        continue;
      }
      now++;
      if (kind == kKindA) {
        std::string blob(blob_bytes, 'x');
        for (char& c : blob) c = static_cast<char>(Next());  // incompressible
        format::Value v[] = {format::Value::U(now), format::Value::Str(blob)};
        w.Append(type[kind], v, 2);
      } else {
        format::Value v[] = {format::Value::U(now)};
        w.Append(type[kind], v, 1);
      }
    }
  }

  // The producer thread ends and its slot is freed for the next one
  // (flush_thread.cc's DrainRings): with no segment open, its unreported
  // drops go to the ledger first; the counters start again from zero.
  void RetireThread() {
    if (w.is_open()) {
      FlushContext ctx{&w, nullptr, ++now, false};
      ledger.ReportThreadDrops(ctx, 7, dropped, reported, KindName);
    } else {
      ledger.DiscardThreadDrops(dropped, reported);
    }
    for (auto& d : dropped) d.store(0);
    for (auto& r : reported) r = 0;
  }

  // The reports a tick makes once a segment is open (flush_thread.cc's Tick).
  void Tick() {
    now++;
    FlushContext ctx{&w, nullptr, now, false};
    if (!w.is_open()) return;
    ledger.ReportThreadDrops(ctx, 7, dropped, reported, KindName);
    ledger.ReportOutputLosses(ctx, KindName);
  }

  bool Open() {
    std::string err;
    const int n = seq++;
    return w.Open(Path(n), format_test::Header(static_cast<uint64_t>(n)), &err);
  }
  std::string Path(int n) const { return dir_ + "/" + name_ + "-" + std::to_string(n) + ".seg"; }
  std::string ActivePath() const { return Path(seq - 1); }

  // A block write (segment_lifecycle.cc's WriteAndRotate).
  bool Flush() {
    std::string err;
    if (w.Flush(&err)) {
      ledger.BlockWritten();
      return true;
    }
    ledger.WriteFailed(w);
    w.Abandon();
    return false;
  }

  // The seal (segment_lifecycle.cc's SealSegment); `removed_before_rename`:
  // the sealed file is removed under us before it gets its name.
  bool Seal(bool removed_before_rename = false) {
    std::string err;
    const DropLedger::Totals totals = ledger.Footer();
    if (!w.Seal(totals, &err)) {
      ledger.WriteFailed(w);
      return false;
    }
    ledger.Sealed();
    if (removed_before_rename) {
      unlink(ActivePath().c_str());
      ledger.SealedFileLost(totals, w);
    }
    return true;
  }

  // The final sequence at exit: a last tick, then the seal.
  void Exit() {
    Tick();
    if (w.is_open()) {
      CHECK(Seal());
    }
  }

  uint64_t Next() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  }

  std::string dir_, name_;
  int seq = 0;
  uint64_t now = 1000;
  uint64_t rng = 88172645463325252ull;
  format::SegmentWriter w;
  DropLedger ledger;
  uint32_t type[kRecordKindCount] = {};
  std::atomic<uint64_t> dropped[kRecordKindCount];
  uint64_t reported[kRecordKindCount];
  std::map<std::string, uint64_t> produced;
};

struct Found {
  std::map<std::string, uint64_t> recorded, dropped;
};

// What a reader finds in every file of `dir` whose name starts with `name`:
// sealed segments and cut-back unsealed ones alike. A sealed segment's footer
// totals agree with its recorder.dropped events.
Found Read(const std::string& dir, const std::string& name) {
  Found f;
  DIR* d = opendir(dir.c_str());
  REQUIRE(d);
  while (dirent* e = readdir(d)) {
    const std::string file = e->d_name;
    if (file.rfind(name + "-", 0) != 0) continue;
    const format::Segment seg = format::ReadSegmentFile(dir + "/" + file);
    CHECK(seg.state != format::SegmentState::kInvalid);
    CHECK(seg.bad_blocks == 0);
    for (const char* kind : {"k.a", "k.b"}) f.recorded[kind] += seg.EventsOf(kind).size();
    std::map<std::string, uint64_t> in_events;
    if (const format::SchemaType* t = seg.TypeByName("recorder.dropped")) {
      const int kind_field = format::Segment::FieldIndex(*t, "kind");
      const int count_field = format::Segment::FieldIndex(*t, "count");
      for (const format::Event* ev : seg.EventsOf("recorder.dropped")) {
        const std::string* kind = seg.String(static_cast<uint32_t>(ev->values[kind_field].u));
        REQUIRE(kind);
        in_events[*kind] += ev->values[count_field].u;
      }
    }
    for (const auto& [kind, n] : in_events) f.dropped[kind] += n;
    if (seg.has_footer) {
      for (const auto& [kind, n] : in_events) CHECK(seg.FooterValue("dropped." + kind).value_or(0) == n);
      for (const auto& [key, n] : seg.footer)
        if (key.rfind("dropped.", 0) == 0) CHECK(in_events[key.substr(8)] == n);
    }
  }
  closedir(d);
  return f;
}

void CheckInvariant(const Process& p, const Found& f) {
  for (const char* kind : {"k.a", "k.b"}) {
    CAPTURE(kind);
    const uint64_t produced = p.produced.count(kind) ? p.produced.at(kind) : 0;
    const uint64_t recorded = f.recorded.count(kind) ? f.recorded.at(kind) : 0;
    const uint64_t dropped = f.dropped.count(kind) ? f.dropped.at(kind) : 0;
    CAPTURE(recorded);
    CAPTURE(dropped);
    CHECK(produced == recorded + dropped);
  }
}

}  // namespace

TEST_CASE("drop ledger: produced = recorded + dropped across rotation and exit") {
  TempDir dir;
  Process p(dir.path, "rot");
  REQUIRE(p.Open());
  p.Produce(kKindA, 10, false);
  p.Produce(kKindA, 3, true);
  p.Produce(kKindB, 2, true);
  p.Tick();
  REQUIRE(p.Flush());
  p.Produce(kKindB, 4, false);
  p.Tick();
  REQUIRE(p.Seal());  // rotation
  REQUIRE(p.Open());
  p.Produce(kKindA, 5, true);  // dropped before the next segment's first tick
  p.Produce(kKindA, 6, false);
  p.Tick();
  p.Produce(kKindB, 1, true);  // dropped after the last tick: the exit's final tick reports it
  p.Exit();
  Found f = Read(dir.path, "rot");
  CHECK(f.recorded["k.a"] == 16);
  CHECK(f.dropped["k.a"] == 8);
  CHECK(f.dropped["k.b"] == 3);
  CheckInvariant(p, f);
}

TEST_CASE("drop ledger: a thread that ends while no segment is open keeps its ring drops counted") {
  TempDir dir;
  Process p(dir.path, "ended");
  REQUIRE(p.Open());
  p.Produce(kKindA, 4, false);
  p.Produce(kKindA, 2, true);
  p.Tick();
  REQUIRE(p.Seal());
  // Output paused (no segment): the thread drops more, is drained, and ends.
  p.Produce(kKindA, 5, true);
  p.Produce(kKindB, 3, false);  // drained while paused: discarded
  p.Produce(kKindB, 7, true);
  p.RetireThread();
  // The slot's next thread, then a segment again.
  p.Produce(kKindB, 1, true);
  REQUIRE(p.Open());
  p.Tick();
  p.Exit();
  Found f = Read(dir.path, "ended");
  CHECK(f.recorded["k.a"] == 4);
  CHECK(f.dropped["k.a"] == 7);
  CHECK(f.dropped["k.b"] == 11);
  CheckInvariant(p, f);
}

TEST_CASE("drop ledger: a write that fails part way carries what its readable blocks do not report") {
  TempDir dir;
  Process p(dir.path, "full");
  REQUIRE(p.Open());
  p.Produce(kKindA, 4, false);
  p.Produce(kKindB, 2, true);
  p.Tick();
  REQUIRE(p.Flush());  // on disk: 4 k.a, 2 k.b dropped
  p.Produce(kKindB, 3, true);
  p.Tick();  // 3 more k.b drops reported, in the block that will fail
  // A full disk (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG) in the middle of the write.
  p.Produce(kKindA, 20, false, 1000);
  rlimit old;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit lim = old;
  lim.rlim_cur = 8192;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  const bool flushed = p.Flush();
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  REQUIRE_FALSE(flushed);
  CHECK_FALSE(p.w.file_vanished());
  // Paused: what the rings hold meanwhile is drained and discarded.
  p.Produce(kKindA, 7, false);
  p.Produce(kKindB, 1, false);
  p.Tick();  // no segment: nothing is reported yet
  // The output is usable again: the next segment reports the 20 lost k.a
  // events, the 7 + 1 discarded records and the 3 carried k.b drops.
  REQUIRE(p.Open());
  p.Produce(kKindA, 2, false);
  p.Exit();
  Found f = Read(dir.path, "full");
  CHECK(f.recorded["k.a"] == 4 + 2);
  CHECK(f.dropped["k.a"] == 20 + 7);
  CHECK(f.dropped["k.b"] == 2 + 3 + 1);
  CheckInvariant(p, f);
}

TEST_CASE("drop ledger: a segment removed under us, before a write or after its seal, is reported again") {
  TempDir dir;
  Process p(dir.path, "gone");
  REQUIRE(p.Open());
  p.Produce(kKindA, 5, false);
  p.Produce(kKindB, 2, true);
  p.Tick();
  REQUIRE(p.Flush());
  p.Produce(kKindA, 1, false);
  unlink(p.ActivePath().c_str());  // with its 5 events and 2 drops
  REQUIRE_FALSE(p.Flush());
  CHECK(p.w.file_vanished());
  REQUIRE(p.Open());
  p.Produce(kKindB, 3, false);
  p.Produce(kKindA, 4, true);
  p.Tick();
  REQUIRE(p.Seal(/*removed_before_rename=*/true));  // sealed, then gone with everything in it
  REQUIRE(p.Open());
  p.Exit();
  Found f = Read(dir.path, "gone");
  CHECK(f.recorded["k.a"] == 0);
  CHECK(f.recorded["k.b"] == 0);
  CHECK(f.dropped["k.a"] == 5 + 1 + 4);
  CHECK(f.dropped["k.b"] == 2 + 3);
  CheckInvariant(p, f);
}

TEST_CASE("drop ledger: a forked child starts a ledger of its own") {
  TempDir dir;
  Process parent(dir.path, "parent");
  REQUIRE(parent.Open());
  parent.Produce(kKindA, 3, false);
  parent.Produce(kKindA, 2, true);
  parent.Tick();
  REQUIRE(parent.Flush());
  parent.Produce(kKindB, 4, true);
  parent.Tick();  // in the parent's footer totals, not on disk yet
  // fork: the child has a copy of the parent's memory, the ledger's too,
  // and resets it (lifecycle.cc's RestartInForkChild); its drop counters
  // beside its ring start at zero with its slot.
  Process child(dir.path, "child");
  child.ledger = parent.ledger;
  child.ledger.SetEventType(child.w.DefineEventType(DropLedger::EventSpec()));
  child.ledger.ResetInForkChild();
  CHECK(child.ledger.Footer().empty());
  REQUIRE(child.Open());
  child.Produce(kKindA, 1, true);
  child.Produce(kKindB, 6, false);
  child.Exit();
  parent.Exit();
  Found pf = Read(dir.path, "parent"), cf = Read(dir.path, "child");
  CHECK(cf.dropped["k.b"] == 0);  // the parent's 4, reported by the parent only
  CHECK(cf.dropped["k.a"] == 1);
  CHECK(pf.dropped["k.b"] == 4);
  CheckInvariant(parent, pf);
  CheckInvariant(child, cf);
}

TEST_CASE("drop ledger: growth of a running total is reported once") {
  uint64_t reported = 0;
  CHECK(DropLedger::Growth(5, &reported) == 5);
  CHECK(DropLedger::Growth(5, &reported) == 0);
  CHECK(DropLedger::Growth(9, &reported) == 4);
  CHECK(reported == 9);
}
