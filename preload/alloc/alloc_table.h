// Address table: one fixed-size set of sampled block addresses. The
// sampled-address set (sampled_address_set.h) is made of these, as tiers
// it adds while the number of live sampled blocks grows.
//
// Lock-free open addressing over 64-byte buckets of 7 slots plus an
// "overflow" count; a slot holds an address or 0 (empty). No tombstones:
// instead of probing until an empty slot, a lookup stops at the first bucket
// whose overflow count is zero.
//
// Invariants (each maintained by Insert/Remove, relied on by Remove):
//  * overflow(b) = number of stored keys that probed past bucket b, i.e. whose
//    home bucket is at or before b and which live after b. Insert raises it
//    for every bucket it passes BEFORE it claims a slot; Remove lowers it
//    AFTER it clears the slot. A reader may see it too high (extra probing),
//    never too low for a key inserted before its lookup.
//  * home_count[b] = number of stored keys whose home bucket is b (at most
//    kMaxProbe * 7 < 256, so a byte): 0 means "not sampled", with no bucket
//    access.
//  * summary[h] = number of stored keys whose hash's low 11 bits are h, or
//    255 for good (sticky: a slot that ever saturates stays "maybe"). The
//    free() fast path reads this first: 2 KiB that every free() touches stays
//    in L1, while a random byte of the home-count array (bucket_count bytes:
//    32 KiB at the default 65536 entries, 512 KiB at a million) missed L1 on
//    most frees of an allocation-heavy program: free() was 4.7% of
//    bench/micro/alloc_work's CPU with that, 1.9% with this filter.
//    Raised with home_count before a slot is claimed, lowered after it is
//    cleared, so it is never too low either.
//  * A key sits at most kMaxProbe - 1 buckets past its home; an insert that
//    finds no room there, or that would exceed max_entries, is refused and
//    counted in full_count() (the set then tries another tier).
//  * Callers never insert an address twice: the hooks remove an address
//    before the real free/realloc can hand it out again.
//
// Memory: mmap'd once by Init (untouched pages cost nothing), never freed, so
// it is inherited as-is by a forked child, whose heap holds the same blocks.
// Keys hash all over the table: after a few thousand inserts (and removes)
// nearly every page has been written and is resident, however few keys are
// live. That is why the set starts with a small table.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace flightrec::alloc {

class AddressTable {
 public:
  static constexpr int kSlotsPerBucket = 7;
  static constexpr int kMaxProbe = 8;

  // Sizes the table for `max_entries` live keys (buckets = 2/7 of it, rounded
  // up to a power of two: load <= 1/2). Returns false if the memory
  // cannot be mapped; the set then stays empty and refuses every insert.
  bool Init(uint64_t max_entries);
  bool initialized() const { return buckets_ != nullptr; }

  // The free() fast path: false means certainly not stored. One acquire
  // load of the live count, one byte of the (cache-resident) summary, and
  // only when that is set, one byte of the home-count array.
  bool MaybeContains(uintptr_t addr) const {
    if (live_.load(std::memory_order_acquire) == 0) return false;
    const size_t h = HashOf(addr);
    if (summary_[h & (kSummarySlots - 1)].load(std::memory_order_relaxed) == 0) return false;
    return home_count_[h & mask_].load(std::memory_order_relaxed) != 0;
  }

  bool Insert(uintptr_t addr);  // false: refused (full), counted
  bool Remove(uintptr_t addr);  // true: was stored, now removed
  bool Contains(uintptr_t addr) const;

  // The sampled-address set's mark on its first table: a later table has
  // taken a key (sticky). On this line, which every free() reads anyway.
  void MarkLaterTablesUsed() { later_used_.store(true, std::memory_order_release); }
  bool LaterTablesUsed() const { return later_used_.load(std::memory_order_acquire); }

  uint64_t live() const { return live_.load(std::memory_order_relaxed); }
  uint64_t full_count() const { return full_.load(std::memory_order_relaxed); }
  uint64_t capacity() const { return max_entries_; }
  uint64_t bucket_count() const { return mask_ + 1; }

 private:
  struct alignas(64) Bucket {
    std::atomic<uint64_t> slot[kSlotsPerBucket];
    std::atomic<uint64_t> overflow;
  };
  static_assert(sizeof(Bucket) == 64);

  static constexpr size_t kSummarySlots = 2048;  // 2 KiB, 32 lines: small enough to stay in L1

  // Fibonacci hashing; blocks are at least 16-byte aligned. 24 bits.
  static size_t HashOf(uintptr_t addr) { return static_cast<size_t>(((addr >> 4) * 0x9E3779B97F4A7C15ull) >> 40); }
  size_t BucketOf(uintptr_t addr) const { return HashOf(addr) & mask_; }
  static size_t SummaryOf(uintptr_t addr) { return HashOf(addr) & (kSummarySlots - 1); }
  void SummaryAdd(uintptr_t addr);
  void SummarySub(uintptr_t addr);

  // Read-mostly fields first; live_ is written on sampled events only.
  Bucket* buckets_ = nullptr;
  std::atomic<uint8_t>* home_count_ = nullptr;
  uint64_t mask_ = 0;
  uint64_t max_entries_ = 0;
  std::atomic<uint64_t> live_{0};
  std::atomic<bool> later_used_{false};
  alignas(64) std::atomic<uint64_t> full_{0};
  alignas(64) std::atomic<uint8_t> summary_[kSummarySlots] = {};
};

}  // namespace flightrec::alloc
