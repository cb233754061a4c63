// Slot claiming for the samplers' per-thread slot arrays (perf_sampler.cc,
// sigprof_sampler.cc): an array of slots with an atomic int `state`, used up
// to a high-water mark that only grows. Lock-free; called at thread start
// (and from the sampler thread when it arms threads from outside).
#pragma once
#include <algorithm>
#include <atomic>

namespace flightrec::sampler {

// Takes a slot in state `free_state` below the high-water mark, else a new
// one above it, moving it to `claimed_state`; -1 when all `max` are taken.
// A new slot is claimed by CAS too: once hwm covers it, another thread's scan
// can find it free and take it first (then this one tries again). A plain
// store there once let two threads share a slot, and one of them went
// unsampled.
template <typename Slot>
int ClaimSlotIn(Slot* slots, std::atomic<int>& hwm, int max, int free_state, int claimed_state) {
  for (;;) {
    const int n = std::min(hwm.load(std::memory_order_acquire), max);
    for (int i = 0; i < n; ++i) {
      int expected = free_state;
      if (slots[i].state.load(std::memory_order_relaxed) == free_state &&
          slots[i].state.compare_exchange_strong(expected, claimed_state, std::memory_order_acquire))
        return i;
    }
    const int i = hwm.fetch_add(1, std::memory_order_seq_cst);
    if (i >= max) return -1;
    int expected = free_state;
    if (slots[i].state.compare_exchange_strong(expected, claimed_state, std::memory_order_acquire)) return i;
  }
}

}  // namespace flightrec::sampler
