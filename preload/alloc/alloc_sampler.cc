// Allocation sampler: the Poisson draws and estimation weights (see
// alloc_sampler.h). The decision logic that uses them lives in
// alloc_profiler.cc.
#include "preload/alloc/alloc_sampler.h"

#include "preload/alloc/sample_math.h"

namespace flightrec::alloc {

__thread AllocThreadState t_alloc __attribute__((tls_model("initial-exec"))) = {0, 0, 0, 0};

uint64_t NextRandom(uint64_t* state) {
  // xorshift64* (Vigna): full period over non-zero states, good low bits.
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

uint64_t SeedRandom(uint64_t a, uint64_t b) {
  // splitmix64 finaliser over the mixed inputs; never returns 0.
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z ? z : 0x9E3779B97F4A7C15ull;
}

int64_t DrawGap(uint64_t* rng, uint64_t mean) {
  if (mean <= 1) return 0;
  // u uniform in (0, 1]: 53 random bits, +1 so log(u) is finite.
  const double u = (static_cast<double>(NextRandom(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  // Rounded up: an allocation of s bytes crosses iff ceil(X) <= s iff X <= s,
  // which is exactly the 1 - e^(-s/mean) the weights assume.
  const double x = NegLogUnit(u) * static_cast<double>(mean);
  if (x <= 1.0) return 1;
  if (x >= static_cast<double>(kNeverSample)) return kNeverSample;
  const int64_t gap = static_cast<int64_t>(x);  // truncated, then rounded up
  return static_cast<double>(gap) < x ? gap + 1 : gap;
}

double SampleBytesWeight(uint64_t size, uint64_t mean) {
  if (mean <= 1) return static_cast<double>(size);
  if (size == 0) return 0.0;
  const double p = OneMinusExpNeg(static_cast<double>(size) / static_cast<double>(mean));
  return static_cast<double>(size) / p;
}

double SampleCountWeight(uint64_t size, uint64_t mean) {
  if (mean <= 1) return 1.0;
  if (size == 0) return 0.0;  // zero-byte allocations are never sampled at mean > 1
  const double p = OneMinusExpNeg(static_cast<double>(size) / static_cast<double>(mean));
  return 1.0 / p;
}

}  // namespace flightrec::alloc

namespace flightrec {

void AllocSamplingHold(int64_t* countdown, uint32_t* in_hook) {
  *countdown = alloc::t_alloc.countdown;
  *in_hook = alloc::t_alloc.in_hook;
  alloc::t_alloc.in_hook = 1;
  // Expired, as on a recorder thread: every allocation meanwhile takes the
  // hooks' slow path, which sends it to the recorder's heap (hook_malloc.cc).
  alloc::t_alloc.countdown = alloc::kRecorderThreadCountdown;
}

void AllocSamplingResume(int64_t countdown, uint32_t in_hook) {
  alloc::t_alloc.countdown = countdown;
  alloc::t_alloc.in_hook = in_hook;
}

}  // namespace flightrec
