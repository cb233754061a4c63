// switch_cost_bench: two threads passing a byte back and forth over a pair
// of pipes, so every hand-over blocks one thread (a voluntary context
// switch), 20 frames below the thread's entry. bench/run_capture_costs.py
// runs it with off-CPU sampling on and off (the CPU sampler on, at a low
// rate, in both) and divides the added process CPU by the context switches:
// what recording off-CPU stacks costs a service that blocks often.
// Prints the process CPU seconds, wall seconds and voluntary context
// switches of the exchange.
//   switch_cost_bench [ROUND_TRIPS]      (default 100000)
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {
int g_ping[2], g_pong[2];
long g_trips;
constexpr int kDepth = 20;

double Now(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One side of the exchange: read from `in`, write to `out`, `trips` times.
__attribute__((noinline)) long Exchange(int in, int out, bool first) {
  char c = 0;
  long done = 0;
  for (long i = 0; i < g_trips; ++i) {
    if (first && write(out, &c, 1) != 1) abort();
    if (read(in, &c, 1) != 1) abort();
    if (!first && write(out, &c, 1) != 1) abort();
    ++done;
  }
  return done;
}

// A real call chain so off-CPU stacks have service-like depth.
__attribute__((noinline)) long Descend(int depth, int in, int out, bool first) {
  long r = depth == 0 ? Exchange(in, out, first) : Descend(depth - 1, in, out, first);
  asm volatile("" : "+r"(r));
  return r;
}

void* Echo(void*) {
  Descend(kDepth, g_ping[0], g_pong[1], false);
  return nullptr;
}
}  // namespace

int main(int argc, char** argv) {
  g_trips = argc > 1 ? atol(argv[1]) : 100000;
  if (pipe(g_ping) != 0 || pipe(g_pong) != 0) return 1;
  rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  const double w0 = Now(CLOCK_MONOTONIC), c0 = Now(CLOCK_PROCESS_CPUTIME_ID);
  pthread_t t;
  if (pthread_create(&t, nullptr, Echo, nullptr) != 0) return 1;
  Descend(kDepth, g_pong[0], g_ping[1], true);
  pthread_join(t, nullptr);
  const double cpu = Now(CLOCK_PROCESS_CPUTIME_ID) - c0, wall = Now(CLOCK_MONOTONIC) - w0;
  getrusage(RUSAGE_SELF, &r1);
  printf("process_cpu_s %.6f wall_s %.6f switches %ld\n", cpu, wall, r1.ru_nvcsw - r0.ru_nvcsw);
  return 0;
}
