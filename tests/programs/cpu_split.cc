// cpu_split: a known CPU split for the sampler tests (built -O2
// -fomit-frame-pointer -g, like a distribution binary).
//
//   worker thread "cpu-worker": worker_main -> outer_step -> leaf_a | leaf_b
//     leaf_a does 70% and leaf_b 30% of the iterations of the same loop in
//     every step, so CPU samples split 70/30 whatever the scheduling.
//   main thread: blocked_in_poll() polls with a timeout until the worker is
//     done, so it is the one blocking function of the off-CPU profile.
//
// usage: cpu_split [cpu_seconds (default 2)]
// Prints "split leaf_a=<iters> leaf_b=<iters>" on success.
#include <poll.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<bool> g_done{false};
volatile uint64_t g_sink;
uint64_t g_iters_a = 0, g_iters_b = 0;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

// noipa: no inlining, cloning or identical-code folding (leaf_a and leaf_b
// must stay two functions with their own code).
extern "C" __attribute__((noipa)) uint64_t leaf_a(uint64_t iters, uint64_t x) {
  for (uint64_t i = 0; i < iters; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    x ^= x >> 29;
  }
  return x;
}

extern "C" __attribute__((noipa)) uint64_t leaf_b(uint64_t iters, uint64_t x) {
  for (uint64_t i = 0; i < iters; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    x ^= x >> 29;
  }
  return x + 1;
}

extern "C" __attribute__((noipa)) uint64_t calibrate_spin(uint64_t iters, uint64_t x) {
  for (uint64_t i = 0; i < iters; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    x ^= x >> 29;
  }
  return x;
}

extern "C" __attribute__((noipa)) uint64_t outer_step(uint64_t unit, uint64_t x) {
  x = leaf_a(7 * unit, x);
  x = leaf_b(3 * unit, x);
  g_iters_a += 7 * unit;
  g_iters_b += 3 * unit;
  return x ^ unit;  // not a tail call: outer_step stays on the stack
}

extern "C" __attribute__((noipa)) void* worker_main(void* arg) {
  const double seconds = *static_cast<double*>(arg);
  // Calibrate: iterations per millisecond of this thread's CPU time.
  uint64_t iters = 1 << 16;
  double t0 = ThreadCpuSeconds();
  uint64_t x = 1;
  while (ThreadCpuSeconds() - t0 < 0.02) {
    x = calibrate_spin(iters, x);
    iters *= 2;
  }
  const double per_ms = static_cast<double>(2 * iters - (1 << 16)) / ((ThreadCpuSeconds() - t0) * 1000.0);
  // One step = 0.5..1.5 ms of CPU, 70% in leaf_a and 30% in leaf_b. The
  // length varies pseudo-randomly so periodic sampling (a 1 ms perf period,
  // a 4 ms scheduler tick) cannot lock onto the step's phase.
  const uint64_t unit = static_cast<uint64_t>(per_ms / 10.0) + 1;
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  const double start = ThreadCpuSeconds();
  while (ThreadCpuSeconds() - start < seconds) {
    rng = rng * 6364136223846793005ull + 1;
    const uint64_t scale = 50 + (rng >> 33) % 101;  // 50..150 %
    x = outer_step(unit * scale / 100 + 1, x);
  }
  g_sink = x;
  g_done.store(true);
  return nullptr;
}

extern "C" __attribute__((noipa)) int blocked_in_poll() {
  int polls = 0;
  while (!g_done.load()) {
    if (poll(nullptr, 0, 20) < 0 && errno != EINTR) return -1;
    ++polls;
  }
  return polls;
}

int main(int argc, char** argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  if (seconds <= 0) seconds = 2.0;
  pthread_t t;
  if (pthread_create(&t, nullptr, worker_main, &seconds) != 0) return 1;
  pthread_setname_np(t, "cpu-worker");
  if (blocked_in_poll() < 0) return 2;
  pthread_join(t, nullptr);
  printf("split leaf_a=%llu leaf_b=%llu\n", static_cast<unsigned long long>(g_iters_a),
         static_cast<unsigned long long>(g_iters_b));
  return 0;
}
