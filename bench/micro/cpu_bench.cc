// cpu_bench: a fixed amount of CPU-bound work (a hash loop through a few
// noinline frames) on one thread, for measuring the sampler's overhead.
// Prints the work's wall and thread-CPU seconds.   cpu_bench [iterations]
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {
volatile uint64_t g_sink;

__attribute__((noinline)) uint64_t Mix(uint64_t h, uint64_t i) { return (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull + i; }
__attribute__((noinline)) uint64_t Step(uint64_t h, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) h = Mix(h, i);
  return h;
}
double Now(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
}  // namespace

int main(int argc, char** argv) {
  const uint64_t iters = argc > 1 ? strtoull(argv[1], nullptr, 10) : 400000000ull;
  const double w0 = Now(CLOCK_MONOTONIC), c0 = Now(CLOCK_PROCESS_CPUTIME_ID);
  uint64_t h = 1;
  for (uint64_t done = 0; done < iters; done += 1000000) h = Step(h, 1000000);
  g_sink = h;
  printf("wall_s %.4f cpu_s %.4f\n", Now(CLOCK_MONOTONIC) - w0, Now(CLOCK_PROCESS_CPUTIME_ID) - c0);
  return 0;
}
