// Stack references: a stack a thread pushed once in full costs only its hash
// in that thread's ring afterwards.
//
// Producer (the owning thread): StackRefCache, a direct-mapped table of the
// hashes whose full record it *committed* to the ring. A repeat pushes only
// the hash. A full record that found the ring full is never marked: the
// consumer never saw it.
// Consumer (the flush thread): StackRefTable, the same slots, each holding the
// frames of the last full record it decoded there. One SPSC ring orders a
// full record before every reference that relies on it, and a slot is
// overwritten on both sides by the same full record, so a reference always
// finds the stack the producer meant. The reference carries the whole hash,
// which the consumer checks: a mismatch (it cannot happen unless a full
// record was lost between the sides) yields "stack unknown", never a wrong
// stack.
//
// Lifetimes: both sides live in the ThreadState slot, in the allocation
// producer's ranges (producer_slots.h: PushedStacksOf, StackTableOf below).
// The producer's cache is cleared when a thread claims the slot (with the
// ring's Reset); the
// consumer's table notices the slot's new generation and forgets. Segment
// rotation changes nothing: the segment writer interns frames per segment
// from the full pcs the table hands it (format/intern_tables.*), so the
// on-disk format does not know about references.
//
// Producer side: no locks, no calls, no host malloc. Consumer side: mimalloc.
#pragma once
#include <cstdint>
#include <cstring>

#include "preload/threads/thread_registry.h"

namespace flightrec {

inline constexpr uint32_t kStackRefSlots = 128;  // a power of two

// Never 0 (0 marks an empty slot). Any 64-bit mix works; this one is a few
// multiplies per frame, small next to the unwind that produced the frames.
inline uint64_t HashStack(const uint64_t* pcs, uint32_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (uint32_t i = 0; i < n; ++i) {
    h ^= pcs[i];
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h ? h : 1;
}

inline uint32_t StackRefSlot(uint64_t hash) { return static_cast<uint32_t>(hash) & (kStackRefSlots - 1); }

// Producer-private, in the thread's producer slot (no allocation).
struct StackRefCache {
  uint64_t known[kStackRefSlots];
  void Clear() { memset(known, 0, sizeof(known)); }
  bool Known(uint64_t hash) const { return known[StackRefSlot(hash)] == hash; }
  // Only after the full record carrying `hash` was committed.
  void MarkCommitted(uint64_t hash) { known[StackRefSlot(hash)] = hash; }
};

// Flush-thread private. Entries allocated lazily from the recorder's heap.
class StackRefTable {
 public:
  struct Entry {
    uint64_t hash = 0;
    uint32_t npcs = 0;
    uint64_t* pcs = nullptr;  // capacity max_frames_ (allocated on first use)
    uint64_t extra = 0;       // the producer's word kept with it (allocations: the sampling rate)
  };
  // A table for stacks of at most max_frames; null without memory.
  static StackRefTable* Create(uint32_t max_frames);
  // The slot's owner changed (`generation`): forget everything.
  void SyncGeneration(uint64_t generation);
  // A full record decoded: remember its frames under `hash`.
  void Learn(uint64_t hash, const uint64_t* pcs, uint32_t npcs, uint64_t extra);
  // A reference decoded: its frames, or null if the table does not hold them.
  const Entry* Find(uint64_t hash) const {
    const Entry& e = entries_[StackRefSlot(hash)];
    return e.hash == hash && hash != 0 ? &e : nullptr;
  }

 private:
  uint32_t max_frames_ = 0;
  uint64_t generation_ = 0;
  Entry entries_[kStackRefSlots];
};

// The thread's pushed stacks (producer side) and the flush thread's table
// for its slot (null until the first sample), in their producer slots.
inline StackRefCache& PushedStacksOf(ThreadState* ts) {
  return ProducerSlot<StackRefCache, kSlotAllocStacksPushed>(ts);
}
inline StackRefTable*& StackTableOf(ThreadState* ts) { return ProducerSlot<StackRefTable*, kSlotAllocStacksTable>(ts); }

}  // namespace flightrec
