// ring_bench: nanoseconds per accepted record push into a Ring (reserve +
// 32-byte write + commit), single thread. Pushes are timed in batches that
// fit the ring; the drain between batches (the flush thread's job) is not
// timed. Prints the median over many batches.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "preload/threads/ring.h"

int main() {
  constexpr size_t kCap = 64 * 1024;
  constexpr int kBatch = 1000;  // 1000 x 40 bytes fits a 64 KiB ring
  alignas(64) static uint8_t buf[kCap];
  flightrec::Ring ring;
  ring.Init(buf, kCap);
  std::vector<double> ns;
  uint64_t drained = 0;
  for (int batch = 0; batch < 3000; ++batch) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) {
      void* p = ring.Reserve(10, 32);
      if (!p) __builtin_trap();  // cannot happen: the batch fits
      // Fields written in place, as the hooks do (placement of a fixed record).
      auto* rec = static_cast<uint64_t*>(p);
      rec[0] = static_cast<uint64_t>(i);
      rec[1] = 1;
      rec[2] = 2;
      rec[3] = 3;
      ring.Commit();
    }
    const auto t1 = std::chrono::steady_clock::now();
    drained += ring.Drain([](const flightrec::RecordHeader&, const void*) {});
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kBatch);
  }
  std::sort(ns.begin(), ns.end());
  printf("ring_bench: median %.2f ns per push (p10 %.2f, p90 %.2f; %zu batches of %d, %llu records drained)\n",
         ns[ns.size() / 2], ns[ns.size() / 10], ns[ns.size() * 9 / 10], ns.size(), kBatch,
         static_cast<unsigned long long>(drained));
  return 0;
}
