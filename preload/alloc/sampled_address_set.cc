// Sampled-address set: tiers of address tables (see sampled_address_set.h).
#include "preload/alloc/sampled_address_set.h"

#include <algorithm>

namespace flightrec::alloc {

// Tier i holds 4096 * 4^i keys, the last one what is left of the setting.
uint64_t SampledAddressSet::TierEntries(int i) const {
  uint64_t planned = 0, size = kFirstTierEntries;
  for (int t = 0; t < i; ++t) {
    planned += size;
    size *= 4;
  }
  if (planned >= max_entries_) return 0;
  if (i == kMaxTiers - 1) return max_entries_ - planned;
  return std::min(size, max_entries_ - planned);
}

bool SampledAddressSet::AddTier(int n) {
  if (n >= kMaxTiers) return false;
  const uint64_t entries = TierEntries(n);
  if (entries == 0 || !tiers_[n].Init(entries)) return false;
  tier_count_.store(n + 1, std::memory_order_release);
  return true;
}

bool SampledAddressSet::Init(uint64_t max_entries) {
  if (initialized()) return true;
  if (max_entries == 0) return false;
  max_entries_ = max_entries;
  if (!AddTier(0)) return false;
  AddTier(1);  // the spare; without it, Grow tries again
  return true;
}

bool SampledAddressSet::Grow() {
  const int n = tier_count_.load(std::memory_order_acquire);
  if (n == 0) return false;
  // The spare is still empty (or a map failed and there is none: try again).
  if (n > 1 && tiers_[n - 1].live() == 0) return false;
  return AddTier(n);
}

bool SampledAddressSet::LaterMaybeContain(uintptr_t addr) const {
  const int n = tier_count_.load(std::memory_order_acquire);
  for (int i = 1; i < n; ++i)
    if (tiers_[i].MaybeContains(addr)) return true;
  return false;
}

bool SampledAddressSet::Insert(uintptr_t addr) {
  const int n = tier_count_.load(std::memory_order_acquire);
  if (n > 0 && tiers_[0].Insert(addr)) return true;
  for (int i = 1; i < n; ++i) {
    // Before the key is there: a free() that finds it must look past the first.
    if (!tiers_[0].LaterTablesUsed()) tiers_[0].MarkLaterTablesUsed();
    if (tiers_[i].Insert(addr)) return true;
  }
  if (n > 0) full_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool SampledAddressSet::Remove(uintptr_t addr) {
  // The filter first: a table that cannot hold it is not touched at all.
  if (tiers_[0].MaybeContains(addr) && tiers_[0].Remove(addr)) return true;
  if (!tiers_[0].LaterTablesUsed()) return false;
  const int n = tier_count_.load(std::memory_order_acquire);
  for (int i = 1; i < n; ++i)
    if (tiers_[i].MaybeContains(addr) && tiers_[i].Remove(addr)) return true;
  return false;
}

bool SampledAddressSet::Contains(uintptr_t addr) const {
  const int n = tier_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (tiers_[i].Contains(addr)) return true;
  return false;
}

uint64_t SampledAddressSet::live() const {
  const int n = tier_count_.load(std::memory_order_acquire);
  uint64_t sum = 0;
  for (int i = 0; i < n; ++i) sum += tiers_[i].live();
  return sum;
}

uint64_t SampledAddressSet::mapped_bytes() const {
  const int n = tier_count_.load(std::memory_order_acquire);
  uint64_t sum = 0;
  for (int i = 0; i < n; ++i) sum += tiers_[i].bucket_count() * (64 + 1);
  return sum;
}

}  // namespace flightrec::alloc
