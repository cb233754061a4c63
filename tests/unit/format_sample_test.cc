// Sample segments for the flightrec-dump integration tests and for measuring
// the format (tests/integration/test_dump_format.py runs these cases).
//
// "format sample set" writes three segments of one process into the directory
// named by FLIGHTREC_FORMAT_SAMPLE_OUT (default: a temporary directory), then
// checks them with the C++ reader. test_dump_format.py asserts on the same
// content: keep the two in step.
//
// "format sample stream" writes one segment of a thread/rusage-like stream to
// FLIGHTREC_FORMAT_STREAM_OUT (default: temporary) with
// FLIGHTREC_FORMAT_STREAM_EVENTS events (default 20000) and reports bytes/event.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "tests/unit/format_test_util.h"

using namespace format_test;

namespace {

constexpr uint64_t kSec = 1'000'000'000;

struct SampleTypes {
  uint32_t start, end, rusage, cpu, dropped, misc;
};

SampleTypes DefineSampleTypes(SegmentWriter* w) {
  SampleTypes t;
  t.start = w->DefineEventType({"thread.start",
                                {{"time", FieldType::kTime, "ns"},
                                 {"tid", FieldType::kUInt, ""},
                                 {"name", FieldType::kString, ""},
                                 {"stack", FieldType::kStack, ""}}});
  t.end = w->DefineEventType({"thread.end", {{"time", FieldType::kTime, "ns"}, {"tid", FieldType::kUInt, ""}}});
  t.rusage = w->DefineEventType({"rusage",
                                 {{"time", FieldType::kTime, "ns"},
                                  {"tid", FieldType::kUInt, ""},
                                  {"utime", FieldType::kUInt, "ns"},
                                  {"stime", FieldType::kUInt, "ns"},
                                  {"maxrss", FieldType::kUInt, "KiB"},
                                  {"minflt", FieldType::kUInt, "count"},
                                  {"majflt", FieldType::kUInt, "count"},
                                  {"nvcsw", FieldType::kUInt, "count"},
                                  {"nivcsw", FieldType::kUInt, "count"}}});
  t.cpu = w->DefineEventType({"cpu.sample",
                              {{"time", FieldType::kTime, "ns"},
                               {"tid", FieldType::kUInt, ""},
                               {"stack", FieldType::kStack, ""},
                               {"weight", FieldType::kUInt, "ns"}}});
  t.dropped = w->DefineEventType(
      {"recorder.dropped",
       {{"time", FieldType::kTime, "ns"}, {"kind", FieldType::kString, ""}, {"count", FieldType::kUInt, "count"}}});
  t.misc = w->DefineEventType({"misc.values",
                               {{"time", FieldType::kTime, "ns"},
                                {"delta", FieldType::kSInt, ""},
                                {"ratio", FieldType::kF64, ""},
                                {"payload", FieldType::kBytes, "bytes"}}});
  return t;
}

const uint64_t kS1[] = {0x400101, 0x400200, 0x900000};
const uint64_t kS2[] = {0x400300, 0x400200};

void Start(SegmentWriter* w, const SampleTypes& t, uint64_t time, uint64_t tid, const char* name, bool stack) {
  Value v[] = {Value::U(time), Value::U(tid), Value::Str(name),
               stack ? Value::Stack(kS1, 3) : Value::Stack(nullptr, 0)};
  w->Append(t.start, v, 4);
}
void End(SegmentWriter* w, const SampleTypes& t, uint64_t time, uint64_t tid) {
  Value v[] = {Value::U(time), Value::U(tid)};
  w->Append(t.end, v, 2);
}
void Rusage(SegmentWriter* w, const SampleTypes& t, uint64_t time, uint64_t tid, uint64_t k) {
  Value v[] = {Value::U(time),        Value::U(tid),      Value::U(k * 1'000'000),
               Value::U(k * 200'000), Value::U(4096 + k), Value::U(10 * k),
               Value::U(0),           Value::U(k),        Value::U(k / 2)};
  w->Append(t.rusage, v, 9);
}
void Cpu(SegmentWriter* w, const SampleTypes& t, uint64_t time, uint64_t tid, int which) {
  Value v[] = {Value::U(time), Value::U(tid), which ? Value::Stack(kS2, 2) : Value::Stack(kS1, 3),
               Value::U(10'101'010)};
  w->Append(t.cpu, v, 4);
}

std::string OutDir(const char* env, TempDir* tmp) {
  const char* e = std::getenv(env);
  if (!e || !*e) return tmp->path;
  std::filesystem::create_directories(e);
  return e;
}

}  // namespace

TEST_CASE("format sample set: three segments of one process") {
  TempDir tmp;
  std::string dir = OutDir("FLIGHTREC_FORMAT_SAMPLE_OUT", &tmp);
  FakeDescriber describer;
  SegmentWriter w;
  w.SetPcDescriber(&describer);
  SampleTypes t = DefineSampleTypes(&w);
  std::string err;
  const std::string base = dir + "/sample-4242-77-";
  for (const char* suffix : {"0.seg", "1.seg", "2.active"}) std::filesystem::remove(base + suffix);

  // Segment 0, sealed: 56 events. The ring drop is recorded both as a
  // recorder.dropped event and as the footer total: one loss, counted once.
  REQUIRE(w.Open(base + "0.seg", Header(0), &err));
  Start(&w, t, 1 * kSec, 100, "main", false);
  Start(&w, t, 1 * kSec + 1'000'000, 101, "worker-1", true);
  Start(&w, t, 1 * kSec + 2'000'000, 102, "worker-2", false);
  for (uint64_t k = 0; k < 10; k++)
    for (uint64_t tid = 100; tid <= 102; tid++) Rusage(&w, t, 1 * kSec + 10'000'000 * (k + 1) + tid, tid, k);
  REQUIRE(w.Flush(&err));
  for (int i = 0; i < 20; i++) Cpu(&w, t, 1 * kSec + 3'000'000 + i * 2'000'000, 101, i % 2);
  Value dropped[] = {Value::U(1 * kSec + 50'000'000), Value::Str("cpu.sample"), Value::U(3)};
  w.Append(t.dropped, dropped, 3);
  const std::string blob(
      "\x00\x01"
      "bin",
      5);
  Value misc[] = {Value::U(1 * kSec + 60'000'000), Value::S(-42), Value::F(0.25), Value::Str(blob)};
  w.Append(t.misc, misc, 4);
  End(&w, t, 1 * kSec + 90'000'000, 102);
  REQUIRE(w.Seal({{"dropped.cpu.sample", 3}}, &err));

  // Segment 1, sealed: 5 events; its drops are only in the footer.
  REQUIRE(w.Open(base + "1.seg", Header(1), &err));
  Start(&w, t, 2 * kSec, 103, "worker-3", false);
  for (uint64_t k = 0; k < 3; k++) Rusage(&w, t, 2 * kSec + 10'000'000 * (k + 1), 103, k);
  End(&w, t, 2 * kSec + 50'000'000, 101);
  REQUIRE(w.Seal({{"dropped.socket.op", 2}}, &err));

  // Segment 2, still active (flushed, never sealed): 8 events. The two
  // misc.values carry extreme values, and the second is older than the first.
  REQUIRE(w.Open(base + "2.active", Header(2), &err));
  for (int i = 0; i < 5; i++) Cpu(&w, t, 3 * kSec + i * 1'000'000, 103, i % 2);
  Value m1[] = {Value::U(3 * kSec + 50'000'000), Value::S(INT64_MIN), Value::F(-2.5), Value::Str("")};
  std::string all_bytes;
  for (int i = 0; i < 256; i++) all_bytes.push_back(static_cast<char>(i));
  Value m2[] = {Value::U(3 * kSec + 40'000'000), Value::S(INT64_MAX), Value::F(1e300), Value::Str(all_bytes)};
  w.Append(t.misc, m1, 4);
  w.Append(t.misc, m2, 4);
  End(&w, t, 3 * kSec + 100'000'000, 103);
  REQUIRE(w.Flush(&err));
  w.Abandon();

  Segment s0 = ReadSegmentFile(base + "0.seg");
  Segment s1 = ReadSegmentFile(base + "1.seg");
  Segment s2 = ReadSegmentFile(base + "2.active");
  CHECK(s0.state == SegmentState::kSealed);
  CHECK(s1.state == SegmentState::kSealed);
  CHECK(s2.state == SegmentState::kActive);
  CHECK(s0.events.size() == 56);
  CHECK(s1.events.size() == 5);
  CHECK(s2.events.size() == 8);
  CHECK(s0.EventsOf("rusage").size() == 30);
  CHECK(s0.FooterValue("dropped.cpu.sample") == 3u);
  CHECK(s1.FooterValue("dropped.socket.op") == 2u);
  CHECK(s0.problems.empty());
  CHECK(s2.problems.empty());
}

TEST_CASE("format sample stream: thread/rusage-like events, bytes per event") {
  TempDir tmp;
  const char* out_env = std::getenv("FLIGHTREC_FORMAT_STREAM_OUT");
  std::string path = out_env && *out_env ? out_env : tmp.File("stream.seg");
  const char* n_env = std::getenv("FLIGHTREC_FORMAT_STREAM_EVENTS");
  uint64_t n = n_env && *n_env ? std::strtoull(n_env, nullptr, 10) : 20000;
  std::filesystem::remove(path);

  SegmentWriter w;
  SampleTypes t = DefineSampleTypes(&w);
  std::string err;
  REQUIRE(w.Open(path, Header(), &err));
  // 64 threads; each 1 ms tick every thread reports its cumulative usage
  // (counters grow by small random steps), threads come and go now and then.
  std::mt19937_64 rng(1);
  const int kThreads = 64;
  uint64_t utime[kThreads] = {}, stime[kThreads] = {}, minflt[kThreads] = {}, vcsw[kThreads] = {};
  uint64_t written = 0, tick = 0;
  while (written < n) {
    uint64_t now = 5 * kSec + tick * 1'000'000;
    for (int th = 0; th < kThreads && written < n; th++, written++) {
      uint64_t tid = 20000 + th;
      if (tick % 500 == 0 && th % 16 == 0) {
        End(&w, t, now + th * 150, tid);
        Start(&w, t, now + th * 150 + 50, tid, "worker", false);
        written += 2;
      }
      utime[th] += rng() % 900'000;
      stime[th] += rng() % 100'000;
      minflt[th] += rng() % 4;
      vcsw[th] += rng() % 3;
      Value v[] = {Value::U(now + th * 150 + rng() % 100),
                   Value::U(tid),
                   Value::U(utime[th]),
                   Value::U(stime[th]),
                   Value::U(8192 + th),
                   Value::U(minflt[th]),
                   Value::U(0),
                   Value::U(vcsw[th]),
                   Value::U(vcsw[th] / 4)};
      w.Append(t.rusage, v, 9);
    }
    tick++;
    if (tick % 100 == 0) REQUIRE(w.Flush(&err));  // a flush every 100 ms of trace
  }
  REQUIRE(w.Seal({}, &err));
  uint64_t bytes = w.stats().bytes_written;
  Segment seg = ReadSegmentFile(path);
  CHECK(seg.state == SegmentState::kSealed);
  CHECK(seg.problems.empty());
  CHECK(seg.events.size() == w.stats().events_written);
  CHECK(seg.events.size() >= n);
  MESSAGE("stream: " << seg.events.size() << " events, " << bytes << " bytes, "
                     << static_cast<double>(bytes) / static_cast<double>(seg.events.size()) << " bytes/event");
}
