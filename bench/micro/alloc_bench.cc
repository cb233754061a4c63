// alloc_bench: what the malloc hooks cost. Runs itself four ways side by
// side, alternating rounds:
//   plain                       no preload
//   plain, one idle thread      no preload, but a second thread that only
//                               sleeps: glibc's malloc takes its arena locks
//                               once a process has ever had two threads, and
//                               the recorder's own threads put every host in
//                               that mode. This side separates that cost from
//                               the hooks'.
//   preloaded, unsampled        FLIGHTREC_ALLOC_SAMPLE_BYTES=0: the hooks only
//                               count down and forward
//   preloaded, default rate     FLIGHTREC_ALLOC_SAMPLE_BYTES=524288: the
//                               countdown plus the occasional sample (stack
//                               capture, ring push, address set) and the
//                               free-side lookup once sampled blocks are live
// and prints, with the ratio to plain:
//   * the ns of a malloc(64)/free pair, and of a pair with sizes cycling
//     through 16..4096 bytes (calling thread's CPU time, fastest batch);
//   * the wall time of a multi-threaded allocation-heavy run (4 threads,
//     each keeping a window of 256 blocks of 16..16K bytes).
// CPU and allocation sampling are the only things that differ: the CPU
// sampler is off in every run.
//
//   alloc_bench LIB           compare (LIB = path to libflightrec.so)
//   alloc_bench --child       one measurement: "pair64_ns pairmix_ns mt_ms"
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/micro/bench_common.h"

namespace {

using bench::Median;
using bench::ThreadCpuNs;

constexpr int kPairsPerBatch = 20000;
constexpr int kBatches = 50;
constexpr int kMtThreads = 4;
constexpr long kMtOpsPerThread = 2000000;

void* volatile g_sink;

double WallNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// The fastest batch: on a shared machine, neighbours only ever add time.
__attribute__((noinline)) double BestPairNs(bool mixed) {
  static const size_t kSizes[] = {16, 32, 48, 64, 100, 128, 256, 512, 1024, 2048, 4096, 24};
  std::vector<double> per_batch;
  for (int b = 0; b < kBatches; ++b) {
    const double t0 = ThreadCpuNs();
    for (int i = 0; i < kPairsPerBatch; ++i) {
      void* p = malloc(mixed ? kSizes[i % 12] : 64);
      g_sink = p;
      free(p);
    }
    per_batch.push_back((ThreadCpuNs() - t0) / kPairsPerBatch);
  }
  return *std::min_element(per_batch.begin(), per_batch.end());
}

void* MtWorker(void* arg) {
  uint64_t x = reinterpret_cast<uintptr_t>(arg) * 0x9E3779B97F4A7C15ull + 1;
  void* window[256] = {};
  for (long i = 0; i < kMtOpsPerThread; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const int slot = static_cast<int>(x & 255);
    free(window[slot]);
    window[slot] = malloc(16 + (x >> 20) % 16384);
    if (window[slot]) *static_cast<char*>(window[slot]) = 1;
  }
  for (void* p : window) free(p);
  return nullptr;
}

double MtWallMs() {
  const double t0 = WallNs();
  pthread_t th[kMtThreads];
  for (int i = 0; i < kMtThreads; ++i)
    pthread_create(&th[i], nullptr, MtWorker, reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1)));
  for (pthread_t t : th) pthread_join(t, nullptr);
  return (WallNs() - t0) / 1e6;
}

void* SleepForever(void*) {
  for (;;) pause();
  return nullptr;
}

int Child() {
  if (getenv("ALLOC_BENCH_IDLE_THREAD")) {
    pthread_t t;
    if (pthread_create(&t, nullptr, SleepForever, nullptr) != 0) return 1;
    pthread_detach(t);
  }
  BestPairNs(false);  // warm up: thread state, first sample, page faults
  const double pair64 = BestPairNs(false);
  const double mixed = BestPairNs(true);
  const double mt = MtWallMs();
  printf("%.2f %.2f %.1f\n", pair64, mixed, mt);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return Child();
  if (argc < 2) {
    fprintf(stderr, "usage: alloc_bench PATH/libflightrec.so\n");
    return 2;
  }
  char dir[] = "/tmp/fr-alloc-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string lib = std::string("LD_PRELOAD=") + argv[1];
  const std::string out = std::string("FLIGHTREC_OUTPUT=") + dir;
  const std::vector<std::vector<std::string>> configs = {
      {},
      {"ALLOC_BENCH_IDLE_THREAD=1"},
      {lib, out, "FLIGHTREC_SAMPLER=off", "FLIGHTREC_ALLOC_SAMPLE_BYTES=0"},
      {lib, out, "FLIGHTREC_SAMPLER=off", "FLIGHTREC_ALLOC_SAMPLE_BYTES=524288"},
  };
  const char* names[] = {"plain", "plain, one idle thread", "preloaded, unsampled (rate 0)", "preloaded, default rate"};
  constexpr int kRounds = 7;
  std::vector<std::vector<double>> v(configs.size() * 3);
  for (int round = 0; round < kRounds; ++round) {
    for (size_t c = 0; c < configs.size(); ++c) {
      std::vector<double> r;
      if (!bench::RunSelf("alloc_bench", "--child", configs[c], 3, &r)) {
        fprintf(stderr, "alloc_bench: child run failed (%s)\n", names[c]);
        return 1;
      }
      for (int k = 0; k < 3; ++k) v[c * 3 + k].push_back(r[k]);
    }
  }
  double base[3];
  for (int k = 0; k < 3; ++k) base[k] = Median(v[k]);
  printf(
      "malloc hooks: median of %d alternating runs; pairs in calling-thread CPU ns (fastest of\n"
      "%d batches of %d), the multi-threaded run (%d threads x %ldM malloc+free, 16..16K bytes) in wall ms\n",
      kRounds, kBatches, kPairsPerBatch, kMtThreads, kMtOpsPerThread / 1000000);
  printf("  %-30s %12s %7s %14s %7s %10s %7s\n", "", "pair 64B ns", "ratio", "pair mixed ns", "ratio", "mt ms",
         "ratio");
  for (size_t c = 0; c < configs.size(); ++c) {
    const double a = Median(v[c * 3]), b = Median(v[c * 3 + 1]), m = Median(v[c * 3 + 2]);
    printf("  %-30s %12.2f %7.3f %14.2f %7.3f %10.1f %7.3f\n", names[c], a, a / base[0], b, b / base[1], m,
           m / base[2]);
  }
  printf("  added per malloc/free pair: unsampled %+.2f ns (64B) %+.2f ns (mixed); default rate %+.2f ns %+.2f ns\n",
         Median(v[6]) - base[0], Median(v[7]) - base[1], Median(v[9]) - base[0], Median(v[10]) - base[1]);
  printf(
      "  of which glibc's multi-threaded mode (plain with one idle thread): %+.2f ns (64B) %+.2f ns (mixed);\n"
      "  the hooks alone (unsampled against that): %+.2f ns (64B) %+.2f ns (mixed)\n",
      Median(v[3]) - base[0], Median(v[4]) - base[1], Median(v[6]) - Median(v[3]), Median(v[7]) - Median(v[4]));
  std::string rm = std::string("rm -rf ") + dir;
  if (system(rm.c_str()) != 0) return 1;
  return 0;
}
