// CpuCredit: keeps a thread's perf CPU samples from claiming more CPU time
// than the thread had.
//
// Why: the cpu-clock event counts wall time while the thread is on a CPU,
// so on a virtual machine it also counts the time the hypervisor gave that
// CPU to someone else (steal). The kernel leaves steal out of the thread's
// own CPU time (CLOCK_THREAD_CPUTIME_ID, what top and getrusage show). On a
// loaded VM a thread's samples added up to 1.5x its CPU time (CI's
// switch-storm test: 2.35 s sampled for 1.53 s). So each drained batch of a
// thread's samples may claim at most the CPU time the thread gained since
// the previous batch, plus a carry of at most one sampling period (samples
// and drains do not line up); beyond that the batch's periods are scaled
// down. Never up: time the samples miss (kernel time when perf may not see
// the kernel, lost records) stays missing rather than being given to
// other stacks.
//
// Sampler thread only; one per perf slot.
#pragma once
#include <algorithm>
#include <cstdint>

namespace flightrec::sampler {

struct CpuCredit {
  uint64_t cpu_seen = 0;  // the thread's CPU time at the last batch (0: none yet)
  uint64_t credit = 0;    // CPU time gained and not yet claimed by samples

  // cpu_now: the thread's CPU time now; periods: the sum of this batch's
  // sample periods; carry: how much unclaimed time may carry over (one
  // sampling period). Returns the factor (0..1] for the batch's periods.
  double Take(uint64_t cpu_now, uint64_t periods, uint64_t carry) {
    if (cpu_seen == 0 || cpu_now < cpu_seen) {  // first batch: nothing to compare with
      cpu_seen = cpu_now;
      credit = carry;
      return 1.0;
    }
    credit = std::min(credit, carry) + (cpu_now - cpu_seen);
    cpu_seen = cpu_now;
    if (periods <= credit) {
      credit -= periods;
      return 1.0;
    }
    const double factor = static_cast<double>(credit) / static_cast<double>(periods);
    credit = 0;
    return factor;
  }
};

}  // namespace flightrec::sampler
