// Unit tests of the samplers themselves, end to end inside this process:
// real perf samples and real SIGPROF samples of a known noinline chain go
// through the rings, the unwinder, the sample queue and the flush source into
// a real segment, which is read back. Also the SIGPROF disposition protocol
// (SIG_IGN/SIG_DFL honoured, stepping aside for an application handler).
#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "format/segment_reader.h"
#include "format/segment_writer.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/seccomp_state.h"
#include "preload/flush/flush_registry.h"
#include "preload/flush/flush_registry_internal.h"
#include "sampler/perf_sampler.h"
#include "sampler/sample_events.h"
#include "sampler/sigprof_sampler.h"
#include "preload/stacks/stack_unwinder.h"
#include "sampler/symbols/symbolizer.h"

namespace {

using flightrec::format::Segment;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

volatile uint64_t g_burn_sink;

extern "C" __attribute__((noipa)) uint64_t sampler_test_leaf(uint64_t x) {
  for (int i = 0; i < 20000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

extern "C" __attribute__((noipa)) void sampler_test_outer(double seconds) {
  const double start = ThreadCpuSeconds();
  uint64_t x = 1;
  while (ThreadCpuSeconds() - start < seconds) x = sampler_test_leaf(x);
  g_burn_sink = x;
}

// Writes whatever the flush sources have queued into a fresh segment and
// reads it back.
Segment FlushToSegment() {
  char dir[] = "/tmp/flightrec-sampler-test-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/t.seg";
  flightrec::format::SegmentWriter w;
  flightrec::sampler::Symbolizer sym;
  w.SetPcDescriber(&sym);
  flightrec::DefineAllEventTypes(&w);
  std::string error;
  REQUIRE(w.Open(path, flightrec::format::SegmentHeaderInfo{}, &error));
  flightrec::FlushContext ctx{&w, nullptr, flightrec::MonotonicNs()};
  flightrec::RunFlushSources(ctx);
  REQUIRE(w.Seal({}, &error));
  Segment seg = flightrec::format::ReadSegmentFile(path);
  unlink(path.c_str());
  rmdir(dir);
  return seg;
}

// Function names of a cpu.sample event's stack, leaf first.
std::vector<std::string> StackNames(const Segment& seg, const flightrec::format::Event& e, int stack_field) {
  std::vector<std::string> out;
  const auto* stack = seg.Stack(static_cast<uint32_t>(e.values[stack_field].u));
  if (!stack) return out;
  for (uint32_t loc_id : *stack) {
    const auto* loc = seg.LocationById(loc_id);
    if (!loc) continue;
    for (const auto& line : loc->lines) {
      const std::string* name = seg.String(line.function);
      out.push_back(name ? *name : "");
    }
  }
  return out;
}

// Counts cpu.sample events of tid whose stack starts leaf <- outer; sums the
// period of every sample of tid.
int CountChainSamples(const Segment& seg, pid_t tid, uint64_t* period_sum) {
  const auto* type = seg.TypeByName("cpu.sample");
  if (!type) return 0;
  const int tid_f = Segment::FieldIndex(*type, "tid");
  const int stack_f = Segment::FieldIndex(*type, "stack");
  const int period_f = Segment::FieldIndex(*type, "period_ns");
  int n = 0;
  for (const auto* e : seg.EventsOf("cpu.sample")) {
    if (e->values[tid_f].u != static_cast<uint64_t>(tid)) continue;
    *period_sum += e->values[period_f].u;
    const std::vector<std::string> names = StackNames(seg, *e, stack_f);
    if (names.size() >= 2 && names[0] == "sampler_test_leaf" && names[1] == "sampler_test_outer") ++n;
  }
  return n;
}

bool PerfUsable() {
  flightrec::sampler::PerfOptions o;
  o.offcpu = false;
  return flightrec::sampler::PerfProbe(o).cpu_ok;
}

pid_t Gettid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

uint64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

TEST_CASE("sampler_perf: samples of a known chain come back unwound and symbolized" * doctest::skip(!PerfUsable())) {
  flightrec::sampler::RegisterSampleEvents();
  flightrec::stacks::PrepareUnwinders();  // what the constructor does in the preload
  flightrec::sampler::PerfOptions o;
  o.hz = 1000;
  o.offcpu = false;
  REQUIRE(flightrec::sampler::PerfConfigure(o, false, false));
  REQUIRE(flightrec::sampler::PerfArmThread(Gettid(), true));
  // 200 ms of CPU, collected every 5 ms like the sampler thread does.
  for (int i = 0; i < 40; ++i) {
    sampler_test_outer(0.005);
    flightrec::sampler::PerfCollect(flightrec::MonotonicNs());
  }
  flightrec::sampler::PerfDisarmSelf();  // saves what is left for the next collection
  flightrec::sampler::PerfCollect(flightrec::MonotonicNs());
  const auto stats = flightrec::sampler::GetPerfStats();
  CHECK(stats.armed >= 1);
  CHECK(stats.bad_records == 0);
  CHECK(stats.lost == 0);
  const Segment seg = FlushToSegment();
  uint64_t period_sum = 0;
  const int n = CountChainSamples(seg, Gettid(), &period_sum);
  // 200 ms of CPU at 1000 Hz; some are in the loop's clock_gettime calls.
  CHECK(n >= 50);
  // cpu-clock periods are nanoseconds of user CPU time (1 ms each here), so
  // they add up to most of the 200 ms burnt (part of it is in the kernel).
  CHECK(period_sum >= 60'000'000ull);
  CHECK(period_sum <= 260'000'000ull);
}

TEST_CASE("sampler_sigprof: the main thread's stack bounds without /proc/self/maps") {
  using flightrec::sampler::MainThreadStackBounds;
  const uint64_t sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  uint64_t lo = 0, hi = 0;
  // The same [stack] the kernel lists, its top exactly, 128 KiB of it.
  uint64_t map_lo = 0, map_hi = 0;
  {
    FILE* f = fopen("/proc/self/maps", "r");
    REQUIRE(f);
    char line[512];
    while (fgets(line, sizeof(line), f))
      if (strstr(line, "[stack]")) sscanf(line, "%lx-%lx", &map_lo, &map_hi);
    fclose(f);
  }
  REQUIRE(map_hi != 0);
  if (map_hi - sp <= 128 * 1024) {  // doctest's own frames are shallow; a deeper sp is refused
    REQUIRE(MainThreadStackBounds(sp, &lo, &hi));
    CHECK(hi == map_hi);
    CHECK(hi - lo == 128 * 1024);
    CHECK(lo >= map_lo);
    CHECK(sp >= lo);
  }
  CHECK_FALSE(MainThreadStackBounds(map_hi - 200 * 1024, &lo, &hi));  // deeper than exec mapped
  // Not on another thread.
  bool other = true;
  std::thread([&] {
    const uint64_t t_sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
    uint64_t a = 0, b = 0;
    other = MainThreadStackBounds(t_sp, &a, &b);
  }).join();
  CHECK_FALSE(other);
}

TEST_CASE("sampler_sigprof: samples, the application's dispositions, stepping aside") {
  flightrec::sampler::RegisterSampleEvents();
  flightrec::stacks::PrepareUnwinders();  // what the constructor does in the preload
  struct sigaction saved;
  REQUIRE(sigaction(SIGPROF, nullptr, &saved) == 0);

  // An application handler already in place: the sampler must not start.
  struct sigaction app;
  std::memset(&app, 0, sizeof(app));
  app.sa_handler = [](int) {};
  REQUIRE(sigaction(SIGPROF, &app, nullptr) == 0);
  flightrec::sampler::SigprofOptions o;
  o.hz = 1000;
  const char* why = "";
  CHECK_FALSE(flightrec::sampler::SigprofInstall(o, &why));
  CHECK(std::string(why).find("own SIGPROF handler") != std::string::npos);

  // Default disposition: installs, arms this thread and samples it.
  std::memset(&app, 0, sizeof(app));
  app.sa_handler = SIG_DFL;
  REQUIRE(sigaction(SIGPROF, &app, nullptr) == 0);
  REQUIRE(flightrec::sampler::SigprofInstall(o, &why));
  const uint64_t cpu_at_arm = ThreadCpuNs();
  REQUIRE(flightrec::sampler::SigprofArmSelf());
  // Burn 250 ms of CPU, collecting every 5 ms like the sampler thread does.
  for (int i = 0; i < 50; ++i) {
    const int saved_errno_probe = (errno = 1234 + i);
    sampler_test_outer(0.005);
    CHECK(errno == saved_errno_probe);  // the handler preserves errno
    flightrec::sampler::SigprofCollect(flightrec::MonotonicNs(), false);
  }
  // Then 250 ms more with the timer silent, as when the kernel loses its
  // signal on a CPU-starved machine: a collector thread (the sampler
  // thread's part) finds this thread's CPU time past its last sample and
  // signals it itself while it runs; so does a last collection here (on
  // this thread, which is running, so it signals itself).
  // Twice: queued as the timer's signal, then (a seccomp filter seen) as a
  // plain tgkill the handler knows by the slot's mark.
  flightrec::sampler::SigprofPauseTimers();
  uint64_t rescued = 0;
  for (const bool filtered : {false, true}) {
    flightrec::g_seccomp_filtered.store(filtered);
    const uint64_t rescued_before = flightrec::sampler::GetSigprofStats().rescued;
    std::atomic<bool> burnt{false};
    std::thread collector([&] {
      while (!burnt.load()) {
        flightrec::sampler::SigprofCollect(flightrec::MonotonicNs(), true);
        usleep(5000);
      }
    });
    sampler_test_outer(0.125);
    burnt.store(true);
    collector.join();
    flightrec::sampler::SigprofCollect(flightrec::MonotonicNs(), true);
    const uint64_t r = flightrec::sampler::GetSigprofStats().rescued - rescued_before;
    CHECK(r >= 1);
    rescued += r;
  }
  flightrec::g_seccomp_filtered.store(false);
  const uint64_t cpu_burnt = ThreadCpuNs() - cpu_at_arm;
  // A thread that ran unsampled and then went to sleep is left alone: no
  // rescue reaches it in its sleep (which a signal would cut short, EINTR).
  // Its clock moved since the last look (the burn, with no collection
  // beside it), which is all a look can see: its stat says it sleeps.
  {
    // A fresh look first, so the one after the burn finds the clock moved
    // since a recent look (the overdue case, which reads the stat).
    flightrec::sampler::SigprofCollect(flightrec::MonotonicNs(), true);
    flightrec::sampler::SigprofCollect(flightrec::MonotonicNs(), true);
    const uint64_t rescued_before = flightrec::sampler::GetSigprofStats().rescued;
    sampler_test_outer(0.015);  // 15 periods: overdue at ten, and well inside the 60 ms
    std::atomic<bool> woke{false};
    std::thread collector([&] {
      while (!woke.load()) {
        flightrec::sampler::SigprofCollect(flightrec::MonotonicNs(), true);
        usleep(5000);
      }
    });
    const timespec nap{0, 200'000'000};
    const int slept = nanosleep(&nap, nullptr);
    const int slept_errno = errno;
    woke.store(true);
    collector.join();
    CHECK(slept == 0);
    CHECK(slept_errno != EINTR);
    CHECK(flightrec::sampler::GetSigprofStats().rescued == rescued_before);
  }
  flightrec::sampler::SigprofDisarmSelf();
  flightrec::sampler::SigprofCollect(flightrec::MonotonicNs(), false);
  CHECK(flightrec::sampler::GetSigprofStats().dropped == 0);
  const Segment seg = FlushToSegment();
  uint64_t period_sum = 0;
  const int n = CountChainSamples(seg, Gettid(), &period_sum);
  CHECK(n >= 3);
  // Each sample weighs the thread CPU time since the one before: together
  // they stand for all of it, bar what ran after the last one (under the
  // 3 ms that call for a rescue, and the last collection).
  CHECK(period_sum <= cpu_burnt);
  CHECK(period_sum + 10'000'000ull >= cpu_burnt);
  MESSAGE("cpu burnt ", cpu_burnt, " ns, samples weigh ", period_sum, " ns, ", rescued, " rescued");

  // While our handler is installed the application's view of SIGPROF is its
  // own: SIG_IGN is remembered and honoured for signals that are not ours.
  struct sigaction ign, old;
  std::memset(&ign, 0, sizeof(ign));
  ign.sa_handler = SIG_IGN;
  int ret = -1;
  REQUIRE(flightrec::sampler::SigprofInterceptSigaction(&ign, &old, &ret));
  CHECK(ret == 0);
  CHECK((old.sa_handler == SIG_DFL));
  struct sigaction query;
  REQUIRE(flightrec::sampler::SigprofInterceptSigaction(nullptr, &query, &ret));
  CHECK((query.sa_handler == SIG_IGN));
  struct sigaction kernel_view;
  REQUIRE(sigaction(SIGPROF, nullptr, &kernel_view) == 0);
  CHECK((kernel_view.sa_flags & SA_SIGINFO) != 0);  // ours stays in the kernel
  raise(SIGPROF);                                   // foreign and ignored: we are still here
  CHECK(flightrec::sampler::SigprofInstalled());

  // The application installs a real handler: we step aside and it gets
  // SIGPROF for itself.
  static std::atomic<int> app_hits{0};
  struct sigaction mine;
  std::memset(&mine, 0, sizeof(mine));
  mine.sa_handler = [](int) { app_hits.fetch_add(1); };
  REQUIRE(flightrec::sampler::SigprofInterceptSigaction(&mine, &old, &ret));
  CHECK(ret == 0);
  CHECK((old.sa_handler == SIG_IGN));  // what the application had set before
  CHECK_FALSE(flightrec::sampler::SigprofInstalled());
  CHECK(flightrec::sampler::GetSigprofStats().stepped_aside == 1);
  raise(SIGPROF);
  CHECK(app_hits.load() == 1);
  // From now on calls pass through to libc.
  CHECK_FALSE(flightrec::sampler::SigprofInterceptSigaction(nullptr, &query, &ret));
  CHECK_FALSE(flightrec::sampler::SigprofArmSelf());

  REQUIRE(sigaction(SIGPROF, &saved, nullptr) == 0);
}

TEST_SUITE("concurrency") {
  TEST_CASE("sampler_queue: producers and the flush source lose nothing, no data race") {
    flightrec::sampler::RegisterSampleEvents();
    flightrec::stacks::PrepareUnwinders();  // what the constructor does in the preload
    char dir[] = "/tmp/flightrec-sampler-queue-XXXXXX";
    REQUIRE(mkdtemp(dir) != nullptr);
    const std::string path = std::string(dir) + "/q.seg";
    flightrec::format::SegmentWriter w;
    flightrec::DefineAllEventTypes(&w);
    std::string error;
    REQUIRE(w.Open(path, flightrec::format::SegmentHeaderInfo{}, &error));
    constexpr int kProducers = 4, kEach = 2000;
    constexpr uint32_t kTidBase = 4000000;  // not a real tid: only this test's events
    std::atomic<int> running{kProducers};
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p) {
      producers.emplace_back([p, &running] {
        uint64_t pcs[3] = {0x1000u + static_cast<uint64_t>(p), 0x2000, 0x3000};
        for (int i = 0; i < kEach; ++i)
          flightrec::sampler::QueueCpuSample(static_cast<uint64_t>(i), kTidBase + static_cast<uint32_t>(p), pcs, 3,
                                             1000000);
        running.fetch_sub(1);
      });
    }
    // The flush thread's side, concurrently.
    while (running.load() > 0) {
      flightrec::FlushContext ctx{&w, nullptr, flightrec::MonotonicNs()};
      flightrec::RunFlushSources(ctx);
    }
    for (auto& t : producers) t.join();
    flightrec::FlushContext ctx{&w, nullptr, flightrec::MonotonicNs()};
    flightrec::RunFlushSources(ctx);
    REQUIRE(w.Seal({}, &error));
    const Segment seg = flightrec::format::ReadSegmentFile(path);
    unlink(path.c_str());
    rmdir(dir);
    const auto* type = seg.TypeByName("cpu.sample");
    REQUIRE(type);
    const int tid_f = Segment::FieldIndex(*type, "tid");
    int per[kProducers] = {};
    for (const auto* e : seg.EventsOf("cpu.sample")) {
      const uint64_t tid = e->values[tid_f].u;
      if (tid >= kTidBase && tid < kTidBase + kProducers) per[tid - kTidBase]++;
    }
    for (int p = 0; p < kProducers; ++p) CHECK(per[p] == kEach);
  }
}
