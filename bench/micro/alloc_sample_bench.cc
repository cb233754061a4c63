// alloc_sample_bench: what one sampled allocation costs the allocating
// thread. malloc(64)+free pairs 16 frames below main, in batches timed
// with the thread's CPU clock and separated by a short sleep so the flush
// thread drains the ring between batches (nothing is dropped).
// bench/run_capture_costs.py runs it with FLIGHTREC_ALLOC_SAMPLE_BYTES=1
// (every allocation sampled: stack capture, ring push, address table insert,
// and the matched free) and =0 (hooks only); the difference per pair is the
// cost of one sample. Prints the median and fastest batch, ns per pair.
//   alloc_sample_bench [BATCHES] [PAIRS_PER_BATCH]     (default 60 x 1000)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/micro/bench_common.h"

namespace {
using bench::ThreadCpuNs;

void* volatile g_sink;
constexpr int kDepth = 16;

__attribute__((noinline)) double Batch(int pairs) {
  const double t0 = ThreadCpuNs();
  for (int i = 0; i < pairs; ++i) {
    void* p = malloc(64);
    g_sink = p;
    free(p);
  }
  return (ThreadCpuNs() - t0) / pairs;
}

// A real call chain so the sampled stacks have service-like depth.
__attribute__((noinline)) double Descend(int depth, int pairs) {
  double r = depth == 0 ? Batch(pairs) : Descend(depth - 1, pairs);
  asm volatile("" : "+x"(r));
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  const int batches = argc > 1 ? atoi(argv[1]) : 60;
  const int pairs = argc > 2 ? atoi(argv[2]) : 1000;
  Descend(kDepth, pairs);  // warm up: thread state, sampler seeding, page faults
  std::vector<double> ns;
  for (int b = 0; b < batches; ++b) {
    usleep(20000);  // the flush thread drains every 5 ms
    ns.push_back(Descend(kDepth, pairs));
  }
  std::sort(ns.begin(), ns.end());
  printf("median_pair_ns %.2f fastest_pair_ns %.2f pairs %d\n", ns[ns.size() / 2], ns[0], batches * pairs);
  return 0;
}
