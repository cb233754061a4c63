// Allocation sampler: per-thread Poisson sampling by bytes.
//
// Sampling points form a Poisson process over the bytes a thread allocates,
// with mean gap `mean` (FLIGHTREC_ALLOC_SAMPLE_BYTES). Each thread keeps a
// countdown of bytes to its next point; an allocation of s bytes is sampled
// when it crosses the point, which happens with probability 1 - e^(-s/mean),
// so a sample stands for s / (1 - e^(-s/mean)) bytes (unbiased). After a
// sample the countdown is redrawn fresh: the process is memoryless, so the
// rest of the crossing allocation does not matter.
//
// mean == 1 means "every allocation" (countdown 0: each one crosses), and the
// reports then weigh samples by their plain size.
//
// Hot path: AllocCountdownExpired() is the only thing an unsampled allocation
// pays: one TLS subtract and a branch. No atomics, no syscalls.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flightrec::alloc {

// Per-thread sampler state, zero-initialised (.tbss): a zero countdown makes
// the first allocation of every thread take the slow path, which sets it up.
struct AllocThreadState {
  int64_t countdown;  // bytes left before the next sampling point
  uint64_t rng;       // xorshift64* state; 0 = not seeded yet
  uint32_t epoch;     // 0 until the thread's Poisson process is started (seeded, first gap)
  uint32_t in_hook;   // inside our own sampled path: never sample, never recurse
};
extern __thread AllocThreadState t_alloc __attribute__((tls_model("initial-exec")));

// Subtracts `size` from the countdown; true when it reached zero or below.
// Unsigned arithmetic so absurd sizes wrap instead of overflowing (UB).
inline bool AllocCountdownExpired(int64_t* countdown, size_t size) {
  *countdown = static_cast<int64_t>(static_cast<uint64_t>(*countdown) - size);
  return __builtin_expect(*countdown <= 0, 0);
}

// Large enough never to expire in practice, small enough not to wrap.
inline constexpr int64_t kNeverSample = int64_t{1} << 62;
// Expired for good (2^62 bytes from wrapping): every allocation of the
// thread takes the slow path (recorder threads: hook_malloc.cc).
inline constexpr int64_t kRecorderThreadCountdown = -(int64_t{1} << 62);

uint64_t NextRandom(uint64_t* state);
uint64_t SeedRandom(uint64_t a, uint64_t b);
// Bytes to the next sampling point: Exponential(mean), at least 1; 0 when
// mean <= 1 (sample everything).
int64_t DrawGap(uint64_t* rng, uint64_t mean);

// Estimation weights (mirrored in scripts/flightrec_lib/profiles.py: alloc_weight).
double SampleBytesWeight(uint64_t size, uint64_t mean);  // bytes one sample stands for
double SampleCountWeight(uint64_t size, uint64_t mean);  // allocations one sample stands for

}  // namespace flightrec::alloc

namespace flightrec {
// The runtime's own work on an application thread (preload/runtime/features.h,
// lifecycle.cc): sampling held off (in_hook set), then resumed where it was.
void AllocSamplingHold(int64_t* countdown, uint32_t* in_hook);
void AllocSamplingResume(int64_t countdown, uint32_t in_hook);
}  // namespace flightrec
