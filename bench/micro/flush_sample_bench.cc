// flush_sample_bench: the flush thread's per-record work for CPU samples,
// in-process and single-threaded, so it can be timed and profiled without the
// noise of a sampled program (issue #39): unwound cpu.sample stacks as a
// server's profile has them go through the sampler -> flush queue
// (QueueCpuSample, the sampler thread's side, untimed here but reported) and
// the queue's flush source (RunFlushSources: the batch swapped out,
// EmitCpuSample per sample), into a SegmentWriter with the real Symbolizer as
// its PcDescriber (stack interned, pcs described on their first use in the
// segment, columns, encode, zstd, write), exactly as the flush thread drives
// them: the queue drained every 50 ms of sample time, blocks written every
// 250 ms (segment_lifecycle.cc, kBlockIntervalNs).
//
// The profile: 32 threads at 99 Hz (one sample every ~316 µs of sample
// time), 400 distinct call paths of depth 6-40 that share their roots as a
// real server's do (each path extends a prefix of an earlier one), over 300
// distinct pcs inside this binary's own text (so libdw has real DWARF to
// resolve), each sample's path drawn from a Zipf(1) distribution.
//
// Reported separately, since symbolization is once per distinct pc:
//   first pass   the 400 paths once each in a fresh process (libdw cold:
//                every pc described for the first time);
//   new segment  the same in each later round's new segment (the symbolizer
//                warm, the segment's intern tables empty: a rotation);
//   steady       SAMPLES samples after that, every stack already interned:
//                the figure the 40 ns goal is about (median of ROUNDS).
// Bytes per sample: the steady samples' share of the file (what the file
// grew by over them, over their count), and the whole file over all samples.
//   flush_sample_bench [SAMPLES [ROUNDS]]
// (FLUSH_SAMPLE_BENCH_KEEP=FILE: pcs from libc's text instead, and the
// read-back check's segment, 10000 samples, kept there: under setarch -R,
// a file whose bytes two builds can compare.)
#include <link.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/micro/bench_common.h"
#include "format/segment_reader.h"
#include "format/segment_writer.h"
#include "preload/flush/flush_registry.h"
#include "preload/flush/flush_registry_internal.h"
#include "sampler/sample_events.h"
#include "sampler/symbols/symbolizer.h"

extern "C" char __executable_start;
extern "C" char etext;

using namespace flightrec;
using bench::ThreadCpuNs;  // bench_common.h

namespace {

uint64_t g_rng = 88172645463325252ull;
uint64_t Rnd() {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

constexpr int kPaths = 400, kPcs = 300, kThreads = 32;
constexpr uint64_t kPeriodNs = 10'101'010;         // 99 Hz
constexpr uint64_t kGapNs = kPeriodNs / kThreads;  // all threads together
constexpr uint64_t kDrainEveryNs = 50'000'000;     // FLIGHTREC_FLUSH_MS
constexpr uint64_t kBlockEveryNs = 250'000'000;    // kBlockIntervalNs
constexpr size_t kMaxBufferedBytes = 1 << 20;      // segment_lifecycle.cc

struct Profile {
  std::vector<std::vector<uint64_t>> paths;  // leaf first
  std::vector<double> cdf;                   // Zipf(1) over paths
  size_t distinct_pcs = 0;
};

// The executable text of the loaded object that holds `addr`.
bool TextOf(const void* addr, uint64_t* lo, uint64_t* hi) {
  struct Find {
    uint64_t addr, lo = 0, hi = 0;
  } f{reinterpret_cast<uint64_t>(addr)};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        auto* f = static_cast<Find*>(arg);
        for (int i = 0; i < info->dlpi_phnum; i++) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          const uint64_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          if (f->addr >= lo && f->addr < hi) {
            f->lo = lo;
            f->hi = hi;
            return 1;
          }
        }
        return 0;
      },
      &f);
  *lo = f.lo;
  *hi = f.hi;
  return f.lo != 0;
}

Profile MakeProfile() {
  Profile p;
  // 300 pcs spread over this binary's text (the recorder's own code linked
  // in: thousands of functions with DWARF), odd offsets inside a function's
  // body as return addresses minus one are. With FLUSH_SAMPLE_BENCH_KEEP,
  // over libc's instead: the same pcs in two builds of this benchmark (with
  // address randomization off, setarch -R), so their files can be compared.
  uint64_t lo = reinterpret_cast<uint64_t>(&__executable_start);
  uint64_t hi = reinterpret_cast<uint64_t>(&etext);
  if (getenv("FLUSH_SAMPLE_BENCH_KEEP") && !TextOf(reinterpret_cast<const void*>(&fclose), &lo, &hi))
    fprintf(stderr, "flush_sample_bench: libc's text not found; pcs from this binary\n");
  std::vector<uint64_t> pool(kPcs);
  for (int i = 0; i < kPcs; i++) pool[i] = lo + 0x1000 + (hi - lo - 0x2000) / kPcs * i + (Rnd() % 64) * 2 + 1;
  // Roots as a thread's: a few fixed frames shared by every path (clone,
  // start_thread, the event loop), then each path continues a prefix of an
  // earlier one with frames of its own. Built root first, stored leaf first.
  std::vector<std::vector<uint64_t>> root_first;
  root_first.push_back({pool[0], pool[1], pool[2], pool[3], pool[4], pool[5]});
  for (int i = 1; i < kPaths; i++) {
    const std::vector<uint64_t>& parent = root_first[Rnd() % root_first.size()];
    const size_t depth = 6 + Rnd() % 35;  // 6-40
    size_t keep = std::min(parent.size(), 4 + static_cast<size_t>(Rnd() % parent.size()));
    keep = std::min(keep, depth - 1);
    std::vector<uint64_t> path(parent.begin(), parent.begin() + keep);
    while (path.size() < depth) path.push_back(pool[6 + Rnd() % (kPcs - 6)]);
    if (std::find(root_first.begin(), root_first.end(), path) != root_first.end()) {
      i--;
      continue;
    }
    root_first.push_back(path);
  }
  std::vector<uint64_t> seen;
  for (auto& path : root_first) {
    seen.insert(seen.end(), path.begin(), path.end());
    p.paths.emplace_back(path.rbegin(), path.rend());
  }
  std::sort(seen.begin(), seen.end());
  p.distinct_pcs = static_cast<size_t>(std::unique(seen.begin(), seen.end()) - seen.begin());
  // Zipf(1): the hottest path ~15% of samples, the top ten ~45%; paths in a
  // shuffled order so popularity is unrelated to depth.
  std::vector<int> order(kPaths);
  for (int i = 0; i < kPaths; i++) order[i] = i;
  for (int i = kPaths - 1; i > 0; i--) std::swap(order[i], order[Rnd() % (i + 1)]);
  std::vector<std::vector<uint64_t>> shuffled(kPaths);
  for (int i = 0; i < kPaths; i++) shuffled[i] = p.paths[order[i]];
  p.paths.swap(shuffled);
  double sum = 0;
  for (int i = 0; i < kPaths; i++) p.cdf.push_back(sum += 1.0 / (i + 1));
  for (double& c : p.cdf) c /= sum;
  return p;
}

struct Clock {
  uint64_t t = 1'000'000'000;
  uint64_t next_drain = 0, next_block = 0;
};

struct Run {
  double flush_ns = 0;  // flush thread CPU (drains and block writes)
  double queue_ns = 0;  // sampler thread's QueueCpuSample, for reference
  long samples = 0;
};

// `samples` samples (path i of `picks` for sample i) through the queue and
// the flush source as the flush thread drives them; returns false on a write
// error.
bool Feed(format::SegmentWriter* w, const Profile& p, const std::vector<int>& picks, Clock* c, Run* run) {
  std::string err;
  size_t i = 0;
  while (i < picks.size()) {
    // What the sampler thread queued over one flush period.
    const double q0 = ThreadCpuNs();
    const uint64_t drain_at = c->t + kDrainEveryNs;
    size_t n = 0;
    for (; i < picks.size() && c->t < drain_at; i++, n++) {
      const std::vector<uint64_t>& s = p.paths[picks[i]];
      c->t += kGapNs / 2 + Rnd() % kGapNs;
      sampler::QueueCpuSample(c->t, 1000 + static_cast<uint32_t>(Rnd() % kThreads), s.data(),
                              static_cast<int>(s.size()), kPeriodNs);
    }
    const double f0 = ThreadCpuNs();
    FlushContext ctx{w, nullptr, c->t};
    RunFlushSources(ctx);
    if (c->t >= c->next_block || w->buffered_bytes() > kMaxBufferedBytes) {
      c->next_block = c->t + kBlockEveryNs;
      if (!w->Flush(&err)) return fprintf(stderr, "flush: %s\n", err.c_str()), false;
    }
    const double f1 = ThreadCpuNs();
    run->queue_ns += f0 - q0;
    run->flush_ns += f1 - f0;
    run->samples += static_cast<long>(n);
  }
  return true;
}

// The same feed, 10000 samples into a file of their own read back: what was
// fed is there, named (not a benchmark of nothing). Not in the rounds, so
// that a profile of the benchmark is the flush thread's work alone.
bool CheckReadBack(sampler::Symbolizer* sym, const Profile& p, const std::vector<int>& all_picks) {
  char dir[] = "/tmp/flush_sample_bench.XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), false;
  const std::string path = std::string(dir) + "/check.active";
  const std::vector<int> picks(all_picks.begin(), all_picks.begin() + std::min<size_t>(all_picks.size(), 10000));
  format::SegmentWriter w;
  w.SetPcDescriber(sym);
  DefineAllEventTypes(&w);
  std::string err;
  Clock c;
  Run run;
  if (!w.Open(path, format::SegmentHeaderInfo{}, &err) || !Feed(&w, p, picks, &c, &run) || !w.Seal({}, &err))
    return fprintf(stderr, "check segment: %s\n", err.c_str()), false;
  const format::Segment seg = format::ReadSegmentFile(path);
  // FLUSH_SAMPLE_BENCH_KEEP=FILE keeps it (to compare two builds' bytes).
  if (const char* keep = getenv("FLUSH_SAMPLE_BENCH_KEEP")) {
    if (rename(path.c_str(), keep) != 0) perror("FLUSH_SAMPLE_BENCH_KEEP");
  }
  unlink(path.c_str());
  rmdir(dir);
  const auto events = seg.EventsOf("cpu.sample");
  size_t frames = 0, named = 0, leaf_ok = 0;
  for (size_t i = 0; i < events.size() && i < picks.size(); i++) {
    const auto* stack = seg.Stack(static_cast<uint32_t>(events[i]->values[2].u));
    if (!stack || stack->size() != p.paths[picks[i]].size()) continue;
    leaf_ok++;
    for (uint32_t id : *stack) {
      const auto* loc = seg.LocationById(id);
      frames++;
      const std::string* fn = loc && !loc->lines.empty() ? seg.String(loc->lines[0].function) : nullptr;
      if (fn && !fn->empty()) named++;
    }
  }
  if (events.size() != picks.size() || leaf_ok != picks.size() || named * 2 < frames)
    return fprintf(stderr,
                   "read back %zu cpu.sample events (fed %zu), %zu with the depth fed, %zu of %zu frames named\n",
                   events.size(), picks.size(), leaf_ok, named, frames),
           false;
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const long samples = argc > 1 ? atol(argv[1]) : 1'000'000;
  const int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (samples <= 0 || rounds <= 0) return fprintf(stderr, "usage: flush_sample_bench [SAMPLES [ROUNDS]]\n"), 2;
  sampler::RegisterSampleEvents();
  sampler::Symbolizer sym;  // one per process, as the flush thread keeps it across segments
  const Profile p = MakeProfile();
  size_t frames = 0;
  for (const auto& s : p.paths) frames += s.size();

  std::vector<int> every(kPaths);
  for (int i = 0; i < kPaths; i++) every[i] = i;
  std::vector<int> picks(static_cast<size_t>(samples));
  double mean_depth = 0;
  for (int& k : picks) {
    const double u = static_cast<double>(Rnd() >> 11) * 0x1.0p-53;
    k = static_cast<int>(std::lower_bound(p.cdf.begin(), p.cdf.end(), u) - p.cdf.begin());
    if (k >= kPaths) k = kPaths - 1;
    mean_depth += static_cast<double>(p.paths[k].size());
  }
  mean_depth /= static_cast<double>(samples);

  std::vector<double> steady, steady_queue, steady_bytes, total_bytes, new_segment;
  double first_pass = 0;
  for (int r = 0; r < rounds; r++) {
    char dir[] = "/tmp/flush_sample_bench.XXXXXX";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    const std::string path = std::string(dir) + "/s.active";
    format::SegmentWriter w;
    w.SetPcDescriber(&sym);
    DefineAllEventTypes(&w);
    format::SegmentHeaderInfo header;
    header.pid = static_cast<uint32_t>(getpid());
    std::string err;
    if (!w.Open(path, header, &err)) return fprintf(stderr, "open: %s\n", err.c_str()), 1;
    Clock c;
    // Every path once: its pcs described and its stack interned.
    Run warm;
    if (!Feed(&w, p, every, &c, &warm)) return 1;
    if (!w.Flush(&err)) return fprintf(stderr, "flush: %s\n", err.c_str()), 1;
    if (r == 0) first_pass = warm.flush_ns / kPaths;
    else new_segment.push_back(warm.flush_ns / kPaths);
    const double bytes0 = static_cast<double>(w.stats().bytes_written);
    c.next_block = c.t + kBlockEveryNs;
    Run run;
    if (!Feed(&w, p, picks, &c, &run)) return 1;
    const double seal0 = ThreadCpuNs();
    if (!w.Seal({}, &err)) return fprintf(stderr, "seal: %s\n", err.c_str()), 1;
    run.flush_ns += ThreadCpuNs() - seal0;
    const double bytes = static_cast<double>(w.stats().bytes_written);
    steady.push_back(run.flush_ns / static_cast<double>(run.samples));
    steady_queue.push_back(run.queue_ns / static_cast<double>(run.samples));
    steady_bytes.push_back((bytes - bytes0) / static_cast<double>(run.samples));
    total_bytes.push_back(bytes / static_cast<double>(run.samples + kPaths));
    unlink(path.c_str());
    rmdir(dir);
  }
  if (!CheckReadBack(&sym, p, picks)) return 1;
  printf(
      "flush_sample_bench: %d paths (mean depth %.1f, %zu distinct pcs), Zipf(1), %d threads at 99 Hz; "
      "%d rounds of %ld samples (mean depth %.1f)\n",
      kPaths, static_cast<double>(frames) / kPaths, p.distinct_pcs, kThreads, rounds, samples, mean_depth);
  printf(
      "  steady state: median %.1f ns per cpu.sample record (min %.1f, max %.1f), %.2f bytes per sample on disk "
      "(whole file %.2f)\n",
      Median(steady), *std::min_element(steady.begin(), steady.end()), *std::max_element(steady.begin(), steady.end()),
      Median(steady_bytes), Median(total_bytes));
  printf("  first pass (fresh process, each path once): %.0f ns per sample (%.2f ms for %zu distinct pcs)\n",
         first_pass, first_pass * kPaths / 1e6, p.distinct_pcs);
  if (!new_segment.empty())
    printf("  a new segment's first pass (symbolizer warm): median %.0f ns per sample\n", Median(new_segment));
  printf("  sampler thread's QueueCpuSample (not the flush thread's): median %.1f ns per sample\n",
         Median(steady_queue));
  return 0;
}
