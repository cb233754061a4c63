// Address table (see alloc_table.h for the invariants).
#include "preload/alloc/alloc_table.h"

#include <sys/mman.h>

namespace flightrec::alloc {

namespace {
constexpr uint64_t kMaxBuckets = uint64_t{1} << 24;  // BucketOf keeps 24 hash bits
}

bool AddressTable::Init(uint64_t max_entries) {
  if (buckets_) return true;
  if (max_entries == 0) return false;
  // Load factor at most 1/2: buckets >= max_entries * 2 / 7.
  uint64_t want = (max_entries * 2 + 6) / 7;
  uint64_t n = 64;
  while (n < want && n < kMaxBuckets) n <<= 1;
  if (max_entries > n * kSlotsPerBucket / 2) max_entries = n * kSlotsPerBucket / 2;
  const size_t bucket_bytes = n * sizeof(Bucket);
  const size_t total = bucket_bytes + n;  // + one home-count byte per bucket
  void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  buckets_ = static_cast<Bucket*>(mem);
  home_count_ = reinterpret_cast<std::atomic<uint8_t>*>(static_cast<char*>(mem) + bucket_bytes);
  mask_ = n - 1;
  max_entries_ = max_entries;
  // Published to other threads by the release of the first Insert's
  // live_.fetch_add, which MaybeContains acquires.
  return true;
}

// A summary slot that reaches 255 stays there (never lowered): it then just
// sends every free() that hashes there on to the home-count byte.
void AddressTable::SummaryAdd(uintptr_t addr) {
  std::atomic<uint8_t>& c = summary_[SummaryOf(addr)];
  uint8_t v = c.load(std::memory_order_relaxed);
  while (v != 255 && !c.compare_exchange_weak(v, static_cast<uint8_t>(v + 1), std::memory_order_relaxed)) {}
}

void AddressTable::SummarySub(uintptr_t addr) {
  std::atomic<uint8_t>& c = summary_[SummaryOf(addr)];
  uint8_t v = c.load(std::memory_order_relaxed);
  while (v != 255 && v != 0 && !c.compare_exchange_weak(v, static_cast<uint8_t>(v - 1), std::memory_order_relaxed)) {}
}

bool AddressTable::Insert(uintptr_t addr) {
  if (!buckets_ || addr == 0) return false;
  if (live_.fetch_add(1, std::memory_order_acq_rel) >= max_entries_) {
    live_.fetch_sub(1, std::memory_order_relaxed);
    full_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const size_t home = BucketOf(addr);
  SummaryAdd(addr);
  home_count_[home].fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < kMaxProbe; ++i) {
    Bucket& b = buckets_[(home + i) & mask_];
    for (int s = 0; s < kSlotsPerBucket; ++s) {
      uint64_t expected = 0;
      if (b.slot[s].load(std::memory_order_relaxed) == 0 &&
          b.slot[s].compare_exchange_strong(expected, addr, std::memory_order_release, std::memory_order_relaxed))
        return true;
    }
    // Raised before we claim a slot further on (invariant: never too low).
    b.overflow.fetch_add(1, std::memory_order_relaxed);
  }
  // No room within reach: undo and refuse.
  for (int i = 0; i < kMaxProbe; ++i) buckets_[(home + i) & mask_].overflow.fetch_sub(1, std::memory_order_relaxed);
  home_count_[home].fetch_sub(1, std::memory_order_relaxed);
  SummarySub(addr);
  live_.fetch_sub(1, std::memory_order_relaxed);
  full_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool AddressTable::Remove(uintptr_t addr) {
  if (!buckets_ || addr == 0) return false;
  const size_t home = BucketOf(addr);
  if (home_count_[home].load(std::memory_order_relaxed) == 0) return false;
  for (int i = 0; i < kMaxProbe; ++i) {
    Bucket& b = buckets_[(home + i) & mask_];
    for (int s = 0; s < kSlotsPerBucket; ++s) {
      uint64_t expected = addr;
      if (b.slot[s].load(std::memory_order_relaxed) == addr &&
          b.slot[s].compare_exchange_strong(expected, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        // Lowered only after the slot is cleared (invariant: never too low).
        for (int j = 0; j < i; ++j) buckets_[(home + j) & mask_].overflow.fetch_sub(1, std::memory_order_relaxed);
        home_count_[home].fetch_sub(1, std::memory_order_relaxed);
        SummarySub(addr);
        live_.fetch_sub(1, std::memory_order_release);
        return true;
      }
    }
    if (b.overflow.load(std::memory_order_relaxed) == 0) return false;
  }
  return false;
}

bool AddressTable::Contains(uintptr_t addr) const {
  if (!buckets_ || addr == 0) return false;
  const size_t home = BucketOf(addr);
  if (home_count_[home].load(std::memory_order_relaxed) == 0) return false;
  for (int i = 0; i < kMaxProbe; ++i) {
    const Bucket& b = buckets_[(home + i) & mask_];
    for (int s = 0; s < kSlotsPerBucket; ++s)
      if (b.slot[s].load(std::memory_order_acquire) == addr) return true;
    if (b.overflow.load(std::memory_order_relaxed) == 0) return false;
  }
  return false;
}

}  // namespace flightrec::alloc
