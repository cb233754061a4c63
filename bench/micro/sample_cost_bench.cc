// sample_cost_bench: fixed CPU-bound work on the main thread, 24 frames
// below main, for measuring what one CPU sample costs the sampled thread
// (bench/run_capture_costs.py runs it at a high sampling rate and divides
// the added thread CPU by the samples in the trace). Prints the main
// thread's CPU seconds (interrupt time included: this kernel has no
// IRQ_TIME_ACCOUNTING), its wall seconds and the whole process's CPU seconds.
//   sample_cost_bench [ITERATIONS]      (default 1.5e9)
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {
volatile uint64_t g_sink;
constexpr int kDepth = 24;

double Now(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

__attribute__((noinline)) uint64_t Spin(uint64_t h, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull + i;
  return h;
}

// A real call chain (the asm keeps the compiler from turning it into a loop),
// so every sample copies and unwinds a stack of service-like depth.
__attribute__((noinline)) uint64_t Descend(int depth, uint64_t h, uint64_t n) {
  uint64_t r = depth == 0 ? Spin(h, n) : Descend(depth - 1, h, n);
  asm volatile("" : "+r"(r));
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  const uint64_t iters = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1500000000ull;
  const double w0 = Now(CLOCK_MONOTONIC), t0 = Now(CLOCK_THREAD_CPUTIME_ID), p0 = Now(CLOCK_PROCESS_CPUTIME_ID);
  uint64_t h = 1;
  for (uint64_t done = 0; done < iters; done += 1000000) h = Descend(kDepth, h, 1000000);
  g_sink = h;
  printf("thread_cpu_s %.6f wall_s %.6f process_cpu_s %.6f\n", Now(CLOCK_THREAD_CPUTIME_ID) - t0,
         Now(CLOCK_MONOTONIC) - w0, Now(CLOCK_PROCESS_CPUTIME_ID) - p0);
  return 0;
}
