// Sampled-address set: which live blocks were sampled, so free() can report
// exactly those and the live heap is known at any moment.
//
// Why tiers: one address table sized for the most live samples a process may
// ever hold (FLIGHTREC_ALLOC_TABLE_ENTRIES, 65,536 by default: 2 MiB) ends up
// resident whole, since keys hash over every page. A worker of a preforking
// Python server had 2.9 MiB of it resident while it held a few hundred live
// samples (issue #44). So the set starts with one small table (4,096
// entries, 130 KiB) and grows by tables four times as big, up to the
// configured total. A process that never holds many live samples never
// writes to more than the first.
//
// Invariants:
//  * One table is always mapped ahead, empty (a spare: address space only,
//    no page of it touched). When the tables in use are full, an insert goes
//    on into the spare at once: no hook ever waits for memory or maps any.
//  * Tables are only added, never removed, and only by the flush thread
//    (Grow, from a flush source, once the spare has taken a key): one
//    writer, no race, nothing to undo in a forked child. A table is mapped
//    whole before tier_count_ is raised with release; readers acquire it.
//  * An address lives in at most one table: the hooks never insert an
//    address twice (alloc_table.h), and Insert stops at the first table that
//    takes it.
//  * Insert tries the tables from the smallest: the small one stays the one
//    written most, and a burst that spilled into a bigger one does not make
//    it the home of every later sample.
//  * Only a burst that fills the spare as well before the flush thread's
//    next tick is refused: counted in full_count() (its free will not be
//    seen; reported as alloc.table_full), as a single full table always was.
//  * The free() fast path asks the first table's filter, and the later ones
//    only once any of them has taken a key (a sticky mark on the first
//    table's line, set before the insert): a process that never spilled
//    pays what one table cost. Asking each table cost ~1 ns more per
//    malloc/free pair at the default rate (bench/micro/alloc_bench).
#pragma once
#include <atomic>
#include <cstdint>

#include "preload/alloc/alloc_table.h"

namespace flightrec::alloc {

class SampledAddressSet {
 public:
  static constexpr uint64_t kFirstTierEntries = 4096;
  static constexpr int kMaxTiers = 12;  // 4096 * 4^10 > 2^26, the largest setting

  // Plans tables for `max_entries` live keys in all and maps the first (and
  // the spare after it). False if the first cannot be mapped: the set stays
  // empty and refuses inserts.
  bool Init(uint64_t max_entries);
  bool initialized() const { return tier_count_.load(std::memory_order_acquire) > 0; }

  // Flush thread only: maps a new spare once the last one has taken a key.
  // True if a table was added.
  bool Grow();

  // The free() fast path: false means certainly not stored.
  bool MaybeContains(uintptr_t addr) const {
    if (tiers_[0].MaybeContains(addr)) return true;
    return __builtin_expect(tiers_[0].LaterTablesUsed(), 0) && LaterMaybeContain(addr);
  }

  bool Insert(uintptr_t addr);  // false: refused (every tier full), counted
  bool Remove(uintptr_t addr);  // true: was stored, now removed
  bool Contains(uintptr_t addr) const;

  uint64_t live() const;
  uint64_t full_count() const { return full_.load(std::memory_order_relaxed); }
  // Live keys the set may hold once every tier is there (the setting).
  uint64_t capacity() const { return max_entries_; }
  int tier_count() const { return tier_count_.load(std::memory_order_acquire); }  // mapped, the spare too
  uint64_t tier_live(int i) const { return i < tier_count() ? tiers_[i].live() : 0; }
  // Bytes of table mapped so far (what may become resident).
  uint64_t mapped_bytes() const;

 private:
  uint64_t TierEntries(int i) const;
  bool AddTier(int n);
  bool LaterMaybeContain(uintptr_t addr) const;

  std::atomic<int> tier_count_{0};
  uint64_t max_entries_ = 0;
  std::atomic<uint64_t> full_{0};
  AddressTable tiers_[kMaxTiers];
};

}  // namespace flightrec::alloc
