// Slot scan: which thread slots a flush tick visits.
//
// Visiting a slot costs a cache miss and usually a TLB miss even when its
// ring is empty: each slot is its own mapping (thread_registry.cc), and the
// flush thread sleeps long enough between ticks for all of them to go cold.
// With 500 threads that sleep, that was most of a tick (about 0.4 ms), and a
// tick comes every FLIGHTREC_FLUSH_MS. So the flush thread keeps its own
// dense list of the slots, in registry order, with how many visits in a row
// found each one idle; a slot idle kQuietVisits times running is visited
// again only on a full scan.
//
// Why records are not late for long: a full scan comes at least every
// kFullScanNs, on every tick a producer's nudge started (a ring past a
// quarter full, flush_wakeup.h), and on the final tick. A quiet thread that
// starts recording again is therefore drained within kFullScanNs, or at once
// if it fills a quarter of its ring first; it cannot lose records to a full
// ring without nudging first.
//
// Threads: the flush thread only (or the stopper that owns the flush state,
// see flush_thread.cc). Slots are never unmapped and the registry list only
// grows at its head, so the slots published since the last call are exactly
// those from the new head down to the previous one.
#pragma once
#include <cstdint>
#include <utility>

#include "format/mi_containers.h"

namespace flightrec {

inline constexpr uint32_t kQuietVisits = 2;
inline constexpr uint64_t kFullScanNs = 250ull * 1000 * 1000;
// ForEachDue: a slot not busy since the last round comes up every this many.
inline constexpr uint32_t kSlowRounds = 10;

// Slot: any type with a `Slot* next` member (ThreadState; a fake in tests).
template <typename Slot>
class SlotScan {
 public:
  // Takes in the slots published since the last call; `head` is the
  // registry's current head.
  void AddNew(Slot* head) {
    if (head == seen_head_) return;
    // New slots sit in front of the previous head: collect, then append them
    // oldest first so the list keeps registry order (oldest slot first).
    const size_t at = entries_.size();
    for (Slot* s = head; s && s != seen_head_; s = s->next) entries_.push_back(Entry{s, 0, true});
    for (size_t i = at, j = entries_.size(); i + 1 < j; ++i, --j) std::swap(entries_[i], entries_[j - 1]);
    seen_head_ = head;
  }

  // Calls visit(slot) for each slot to visit this tick: all of them when
  // `full`, else those not quiet. visit returns whether the slot was busy
  // (its ring had records, or it changed state): an idle visit counts
  // towards quiet, a busy one clears it. stop() true ends the scan early (a
  // stop request).
  // Returns whether it passed over a quiet slot.
  template <typename Visit, typename Stop>
  bool ForEach(bool full, Visit visit, Stop stop) {
    bool skipped = false;
    for (Entry& e : entries_) {
      if (stop()) return skipped;
      if (!full && e.idle_visits >= kQuietVisits) {
        skipped = true;
        continue;
      }
      if (visit(e.slot)) {
        e.idle_visits = 0;
        e.busy_since_due = true;
      } else if (e.idle_visits < kQuietVisits) {
        e.idle_visits++;
      }
    }
    return skipped;
  }

  // Calls fn(slot) for the slots due a fresh look at what only the kernel
  // knows of their thread (its name, which a prctl or another thread's
  // pthread_setname_np changes without a record): each slot new or busy on a
  // visit since the last round, and in turn 1/kSlowRounds of the others, so
  // a sleeping thread is looked at every kSlowRounds rounds, not every one
  // (reading 500 threads' /proc/self/task/<tid>/comm took about 5 ms).
  // `all`: every slot (the final tick: the trace ends with the names as
  // they are).
  template <typename Fn>
  void ForEachDue(bool all, Fn fn) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      Entry& e = entries_[i];
      if (all || e.busy_since_due || i % kSlowRounds == round_) fn(e.slot);
      e.busy_since_due = false;
    }
    round_ = (round_ + 1) % kSlowRounds;
  }

  size_t size() const { return entries_.size(); }
  size_t quiet() const {
    size_t n = 0;
    for (const Entry& e : entries_) n += e.idle_visits >= kQuietVisits;
    return n;
  }

 private:
  struct Entry {
    Slot* slot;
    uint32_t idle_visits;
    bool busy_since_due;  // new, or busy on a visit since the last ForEachDue
  };
  format::MiVector<Entry> entries_;
  Slot* seen_head_ = nullptr;
  uint32_t round_ = 0;
};

}  // namespace flightrec
