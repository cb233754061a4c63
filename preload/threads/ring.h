// Ring: a single-producer / single-consumer byte ring of variable-length,
// 8-byte-aligned records. The producer is one application thread (hooks and
// that thread's signal handlers, serialised by producer_busy); the
// consumer is the flush thread.
//
// Invariants:
//  * head_ (written only by the producer) and tail_ (written only by the
//    consumer) are monotonically increasing byte positions; head_-tail_ <=
//    capacity_. Positions are taken modulo capacity_ (a power of two).
//  * A record never wraps: when it does not fit before the end, the producer
//    writes a padding header (kind 0) covering the rest and starts at 0.
//  * The producer never blocks: if there is no room, Reserve returns null and
//    the caller counts a drop.
//  * Once per filling, when a reservation takes the ring past a quarter
//    full, TakeNudge() answers true once: the caller wakes the consumer
//    early, so the consumer can sleep long while producers are quiet
//    (flush_wakeup.h), and a consumer slow to be scheduled still has three
//    quarters of the ring of margin.
//  * Rewind: the producer goes back to offset 0 whenever it finds the ring
//    empty after the consumer has read past a sixteenth of it, 16 KiB at
//    most (the consumer hints so once per drain; the producer checks at its
//    next record). The jump from `rewind_from_` to the next lap start
//    `rewind_to_` holds no bytes: both sides count it as consumed (the
//    producer's free space is the whole ring again at once; the consumer
//    skips it when its tail reaches it). So a thread touches only the front pages its records
//    reach between two drains, not the whole ring after its first lap: the
//    rest of the mapping stays untouched address space (issue #44: a PostgreSQL
//    backend wrote its 256 KiB ring and 128 KiB SIGPROF ring whole).
//    Positions stay monotonic; consumed() excludes the jumps.
//  * Trim: pages a rewind leaves behind go back to the kernel. A burst (a
//    process's start before its first drain, a busy spell) may have taken
//    the producer far into the ring; at a rewind it gives back, with one
//    madvise(MADV_DONTNEED), the pages past what this lap and the one before
//    it reached, when that is 64 KiB or more. Safe without a lock: the ring
//    is empty at a rewind, so the consumer reads nothing there, and the
//    producer is the only writer and writes there again only after a later
//    lap's records reach it. A raw system call (async-signal-safe, errno
//    untouched), at most once per rewind; bursts are rare, so the next laps
//    fault back only pages they use.
//  * Memory is supplied by the caller (mmap'd per thread); no allocation here.
//  * Growth, once per Init: a bigger buffer may be offered (OfferGrowth, by
//    the consumer; or ClaimOffer + PublishOffer, by the producer itself
//    from a spare when it finds the ring full). The producer takes it at
//    its next wrap, or at once when it finds the ring full (GrowNow). From
//    that position (switch_pos_, published before the Commit that covers
//    it) records are in the new buffer, still at position & (capacity - 1):
//    the new buffer holds only positions from the switch on, and the fill
//    limit (head - tail <= new capacity) keeps them from overlapping, so the
//    push's fast path is unchanged. The consumer finishes the old buffer's
//    records first, then follows. The old buffer is never written again;
//    both stay mapped until the consumer's owner resets the ring (Reset).
#pragma once
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <sys/mman.h>
#include <sys/syscall.h>

#include "preload/crash/raw_syscall.h"
#include "preload/threads/record_kinds.h"

namespace flightrec {

struct RecordHeader {
  uint16_t kind;  // RecordKind; 0 = padding
  uint16_t flags;
  uint32_t size;  // total bytes including this header, multiple of 8
};
static_assert(sizeof(RecordHeader) == 8);

class Ring {
 public:
  // capacity must be a power of two >= 64; buffer must be 8-byte aligned.
  // The buffer given here is the ring's base: Reset returns to it.
  void Init(uint8_t* buffer, size_t capacity) {
    base_buf_ = buffer;
    base_cap_ = capacity;
    Reset();
  }
  // Empty, on the base buffer, with no growth offered. No producer or
  // consumer may be using the ring.
  void Reset() {
    buf_ = base_buf_;
    capacity_ = base_cap_;
    c_buf_ = base_buf_;
    c_cap_ = base_cap_;
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
    cached_tail_ = 0;
    pending_head_ = 0;
    nudged_ = false;
    nudge_pending_ = false;
    offer_cap_ = 0;
    offer_claimed_.store(false, std::memory_order_relaxed);
    offer_buf_.store(nullptr, std::memory_order_relaxed);
    switch_pos_.store(kNoSwitch, std::memory_order_relaxed);
    rewind_hint_.store(false, std::memory_order_relaxed);
    rewind_from_.store(kNoSwitch, std::memory_order_relaxed);
    rewind_to_.store(kNoSwitch, std::memory_order_relaxed);
    p_rewind_from_ = kNoSwitch;
    p_rewind_to_ = kNoSwitch;
    rewinds_ = 0;
    p_touched_end_ = 0;
    p_last_lap_end_ = 0;
    trimmed_bytes_ = 0;
    skipped_ = 0;
    unreadable_bytes_ = 0;
  }
  // The capacity given to Init (the largest record is half of it).
  size_t capacity() const { return base_cap_; }
  // Consumer: the capacity of the buffer it reads now.
  size_t consumer_capacity() const { return c_cap_; }
  // Consumer: the base buffer once it has followed a switch to the grown
  // one (nullptr before). Neither side touches it again until Reset, so its
  // owner may give its pages back (ring_growth.h).
  uint8_t* left_base_buffer() const { return c_buf_ != base_buf_ ? base_buf_ : nullptr; }

  // Consumer: offers `buffer` (new_capacity bytes, a power of two larger
  // than the current one, 8-byte aligned, writable) to the producer, which
  // moves to it at a suitable wrap. At most one offer per Init/Reset; false
  // (nothing changes) if one was made already.
  bool OfferGrowth(uint8_t* buffer, size_t new_capacity) {
    if (new_capacity <= base_cap_ || !ClaimOffer()) return false;
    PublishOffer(buffer, new_capacity);
    return true;
  }
  // Either side: the one right to offer (false: an offer was made or is
  // being made). The winner then publishes a buffer or gives the right back.
  bool ClaimOffer() {
    bool expected = false;
    return offer_claimed_.compare_exchange_strong(expected, true, std::memory_order_acq_rel);
  }
  void PublishOffer(uint8_t* buffer, size_t new_capacity) {
    offer_cap_ = new_capacity;
    offer_buf_.store(buffer, std::memory_order_release);
  }
  void UnclaimOffer() { offer_claimed_.store(false, std::memory_order_release); }
  // Producer, outside Reserve..Commit, when a record found no room: moves to
  // the offered buffer at the current head, without waiting for a wrap.
  // False if nothing is offered or it was taken already.
  bool GrowNow() {
    uint8_t* offered = offer_buf_.load(std::memory_order_acquire);
    if (offered == nullptr || offered == buf_ || offer_cap_ <= capacity_) return false;
    buf_ = offered;
    capacity_ = offer_cap_;
    switch_pos_.store(pending_head_, std::memory_order_relaxed);  // the next Commit's release publishes it
    TrimStartsOver();
    return true;
  }
  // The offered buffer (nullptr if none), for its owner to release after Reset.
  // Acquire: the producer may have published it (a spare it took), and
  // offered_capacity() is only valid after a non-null answer from here.
  uint8_t* offered_buffer() const { return offer_buf_.load(std::memory_order_acquire); }
  size_t offered_capacity() const { return offer_cap_; }

  // Producer: returns space for a record of `payload` bytes after the header,
  // or nullptr if the ring is full. Must be followed by Commit().
  void* Reserve(uint16_t kind, uint32_t payload) {
    const uint32_t size = static_cast<uint32_t>((sizeof(RecordHeader) + payload + 7) & ~size_t{7});
    if (size > capacity_ / 2) return nullptr;
    uint64_t head = pending_head_;  // == head_ outside Reserve..Commit
    size_t offset = head & (capacity_ - 1);
    size_t to_end = capacity_ - offset;
    // Expectations keep the common push (no wrap, room) one straight run of
    // code: fewer instruction cache lines to fetch again after a syscall.
    bool wraps = __builtin_expect(to_end < size, 0);
    uint64_t need = size;
    if (wraps) need += to_end;  // padding to the end, then the record at 0
    // Re-read the consumer's position only when the cached one says "over
    // a quarter full", or when the consumer hints that a rewind may be due:
    // keeps the consumer's cache line out of the common path. Past a
    // quarter for real, the consumer is nudged once; it is not again until
    // a re-read finds the ring at most a quarter full.
    const bool hinted = rewind_hint_.load(std::memory_order_relaxed);
    if (__builtin_expect(head + need - cached_tail_ > capacity_ / 4 || hinted, 0)) {
      cached_tail_ = EffectiveTail(tail_.load(std::memory_order_acquire));
      if (hinted && RewindIfEmpty(head)) {
        head = pending_head_;
        offset = 0;
        to_end = capacity_;
        wraps = false;
        need = size;
      }
      const uint64_t fill = head + need - cached_tail_;
      if (fill > capacity_) return nullptr;
      if (fill <= capacity_ / 4) {
        nudged_ = false;
      } else if (!nudged_) {
        nudged_ = true;
        nudge_pending_ = true;
      }
    }
    uint64_t pos = head;
    if (wraps) {
      p_touched_end_ = capacity_;  // this lap reached the end
      auto* pad = reinterpret_cast<RecordHeader*>(buf_ + offset);
      pad->kind = kRecPadding;
      pad->flags = 0;
      pad->size = static_cast<uint32_t>(to_end);
      pos += to_end;
      TakeGrowthAt(pos);
    }
    auto* h = reinterpret_cast<RecordHeader*>(buf_ + (pos & (capacity_ - 1)));
    h->kind = kind;
    h->flags = 0;
    h->size = size;
    pending_head_ = pos + size;
    return h + 1;
  }
  void Commit() { head_.store(pending_head_, std::memory_order_release); }
  // Producer, after Commit: true once when the ring has just passed a quarter full.
  bool TakeNudge() {
    if (__builtin_expect(!nudge_pending_, 1)) return false;
    nudge_pending_ = false;
    return true;
  }

  // Consumer: calls fn(const RecordHeader&, const void* payload) for every
  // committed record (padding skipped), then frees the space. Returns count.
  template <typename Fn>
  size_t Drain(Fn&& fn) {
    const uint64_t head = head_.load(std::memory_order_acquire);
    // Read after head_: a switch inside [tail, head) was published before
    // the Commit that made head_ cover it.
    const uint64_t switch_pos = switch_pos_.load(std::memory_order_relaxed);
    uint64_t tail = tail_.load(std::memory_order_relaxed);
    size_t n = 0;
    // Read after head_ too: a rewind inside [tail, head) was published
    // before the Commit that made head_ cover it, and the producer makes no
    // other until this drain's tail_ shows the ring empty.
    const uint64_t rewind_from = rewind_from_.load(std::memory_order_relaxed);
    const uint64_t rewind_to = rewind_to_.load(std::memory_order_relaxed);
    while (tail < head) {
      // The switch first: a producer that moved to the grown buffer because
      // its ring was full (GrowNow) may rewind in the same push, when the
      // ring had emptied meanwhile; that jump starts at the switch and lands
      // in the grown buffer. (Following a switch twice changes nothing.)
      if (__builtin_expect(tail == switch_pos, 0)) {
        c_buf_ = offer_buf_.load(std::memory_order_relaxed);
        c_cap_ = offer_cap_;
      }
      if (__builtin_expect(tail == rewind_from, 0)) {
        skipped_ += rewind_to - rewind_from;
        tail = rewind_to;
        continue;
      }
      const auto* h = reinterpret_cast<const RecordHeader*>(c_buf_ + (tail & (c_cap_ - 1)));
      const uint32_t size = h->size;
      if (__builtin_expect(size < sizeof(RecordHeader) || size > c_cap_, 0)) {
        tail = SkipUnreadable(tail, head, switch_pos, rewind_from, rewind_to);
        break;
      }
      if (h->kind != kRecPadding) {
        fn(*h, static_cast<const void*>(h + 1));
        ++n;
      }
      tail += size;
    }
    tail_.store(tail, std::memory_order_release);
    // Past the front sixteenth (or 16 KiB of a big ring): ask the producer
    // to come back to offset 0 if it finds the ring empty at its next
    // record. A store to the
    // producer's line once per drain at most, and only while it is away
    // from the front.
    if (c_cap_ != 0 && (tail & (c_cap_ - 1)) >= std::min<uint64_t>(c_cap_ / 16, kRewindPastBytes) &&
        !rewind_hint_.load(std::memory_order_relaxed))
      rewind_hint_.store(true, std::memory_order_relaxed);
    return n;
  }
  // Consumer: bytes of committed records it could not read (a header no
  // record can have) and skipped, since Init/Reset. Always 0 unless a bug
  // broke the ring's invariants; its owner reports any as lost.
  uint64_t unreadable_bytes() const { return unreadable_bytes_; }
  // Producer (or anyone once it has stopped): rewinds made since Init/Reset,
  // and bytes of pages their trims gave back.
  uint64_t rewinds() const { return rewinds_; }
  uint64_t trimmed_bytes() const { return trimmed_bytes_; }
  // Consumer: bytes consumed so far (records and padding; rewinds' jumps
  // hold no bytes and are not counted).
  uint64_t consumed() const { return tail_.load(std::memory_order_relaxed) - skipped_; }
  bool Empty() const { return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire); }

 private:
  static constexpr uint64_t kNoSwitch = UINT64_MAX;
  // A big ring (a SIGPROF ring sized for 250 ms of 16 KiB records: up to
  // 4 MiB) rewinds past 16 KiB, not a sixteenth: a thread writing 50 KiB
  // between drains kept 256 KiB of a 4 MiB ring resident.
  static constexpr uint64_t kRewindPastBytes = 16 << 10;

  // Producer: the consumer's position with the last rewind's jump counted
  // as consumed (the consumer's tail is at the jump's start, or past it).
  uint64_t EffectiveTail(uint64_t tail) const { return tail == p_rewind_from_ ? p_rewind_to_ : tail; }

  // Consumer, at a header no record can have (cannot happen unless a bug
  // broke the invariants: one did, a rewind at a switch, caught only by a
  // 64-thread soak): with no way to find the next record, everything up to
  // head is skipped and counted, so the ring does not stay stuck and lose
  // all that follows uncounted. A switch or a rewind's jump in the skipped
  // span is taken as Drain would have. Returns the new tail (head).
  __attribute__((noinline, cold)) uint64_t SkipUnreadable(uint64_t tail, uint64_t head, uint64_t switch_pos,
                                                          uint64_t rewind_from, uint64_t rewind_to) {
    uint64_t bytes = head - tail;
    if (switch_pos > tail && switch_pos <= head) {
      c_buf_ = offer_buf_.load(std::memory_order_relaxed);
      c_cap_ = offer_cap_;
    }
    if (rewind_from > tail && rewind_from < head && rewind_to <= head) {
      bytes -= rewind_to - rewind_from;
      skipped_ += rewind_to - rewind_from;
    }
    unreadable_bytes_ += bytes;
    return head;
  }

  // Producer, in Reserve's slow path, when the consumer hinted (see Rewind
  // at the top): if the ring is empty (cached_tail_, just re-read, equals
  // head) and head is past offset 0, the next record starts the next lap at
  // offset 0. Not while a growth offer waits: the next wrap takes that.
  // The jump is published by the next Commit's release, with the record.
  __attribute__((noinline)) bool RewindIfEmpty(uint64_t head) {
    rewind_hint_.store(false, std::memory_order_relaxed);
    if (cached_tail_ != head || (head & (capacity_ - 1)) == 0) return false;
    uint8_t* offered = offer_buf_.load(std::memory_order_acquire);
    if (offered != nullptr && offered != buf_) return false;
    TrimBehind(head & (capacity_ - 1));
    const uint64_t lap = (head | (capacity_ - 1)) + 1;
    rewind_from_.store(head, std::memory_order_relaxed);
    rewind_to_.store(lap, std::memory_order_relaxed);
    p_rewind_from_ = head;
    p_rewind_to_ = lap;
    rewinds_++;
    pending_head_ = lap;
    cached_tail_ = lap;
    return true;
  }

  // Producer, at a rewind from offset lap_end (see Trim at the top): gives
  // back the pages past max(lap_end, the previous lap's end), if 64 KiB or
  // more of them may be resident. Only for a page-aligned buffer (every
  // mmap'd ring; tests may pass others).
  void TrimBehind(size_t lap_end) {
    constexpr size_t kPage = 4096, kTrimMinBytes = 64 << 10;
    const size_t reached = lap_end > p_touched_end_ ? lap_end : p_touched_end_;
    size_t keep = lap_end > p_last_lap_end_ ? lap_end : p_last_lap_end_;
    keep = (keep + kPage - 1) & ~(kPage - 1);
    p_last_lap_end_ = lap_end;
    p_touched_end_ = reached;
    const size_t end = (reached + kPage - 1) & ~(kPage - 1);
    if (end < keep + kTrimMinBytes || (reinterpret_cast<uintptr_t>(buf_) & (kPage - 1)) != 0) return;
    const long rc = RawSyscall6(SYS_madvise, reinterpret_cast<long>(buf_ + keep), static_cast<long>(end - keep),
                                MADV_DONTNEED, 0, 0, 0);
    // Refused (the program locked its memory: mlockall): the pages stay,
    // and later rewinds do not ask again for the same ones.
    p_touched_end_ = keep;
    if (rc == 0) trimmed_bytes_ += end - keep;
  }
  // Producer, at a wrap to `pos`: moves to an offered buffer (positions from
  // pos on map into it by its own mask; see Growth above). Out of line of
  // the push: it runs once per trip round the ring.
  __attribute__((noinline)) void TakeGrowthAt(uint64_t pos) {
    uint8_t* offered = offer_buf_.load(std::memory_order_acquire);
    if (offered == nullptr || offered == buf_) return;
    buf_ = offered;
    capacity_ = offer_cap_;
    switch_pos_.store(pos, std::memory_order_relaxed);  // Commit's release publishes it
    TrimStartsOver();
  }
  // A grown buffer may have been populated whole when it was mapped: its
  // first trim may give back everything past the laps' ends.
  void TrimStartsOver() {
    p_touched_end_ = capacity_;
    p_last_lap_end_ = 0;
  }

  // Everything a push touches shares one cache line (a hook around a system
  // call finds its lines evicted and pays for each one); the consumer reads
  // head_ here once per drain. tail_, which the consumer writes, has its own.
  alignas(64) uint8_t* buf_ = nullptr;
  size_t capacity_ = 0;
  // Producer-private: the committed head after Commit(), the reserved end
  // between Reserve() and Commit(). A failed Reserve leaves it unchanged.
  uint64_t pending_head_ = 0;
  uint64_t cached_tail_ = 0;    // producer-private; never ahead of tail_
  bool nudged_ = false;         // producer-private: this filling was reported
  bool nudge_pending_ = false;  // producer-private: TakeNudge() answers true
  std::atomic<uint64_t> head_{0};
  // Set by the consumer (see Drain), cleared by the producer. On this line:
  // the push reads it on every record.
  std::atomic<bool> rewind_hint_{false};
  // Producer-private copies of the last rewind's jump (EffectiveTail).
  uint64_t p_rewind_from_ = kNoSwitch;
  uint64_t p_rewind_to_ = kNoSwitch;
  uint64_t rewinds_ = 0;  // producer-private: a count, for tests
  // Producer-private (Trim): how far into the buffer pages may be resident,
  // where the last rewound lap ended, and what trims gave back.
  size_t p_touched_end_ = 0;
  size_t p_last_lap_end_ = 0;
  uint64_t trimmed_bytes_ = 0;

 public:
  // Producer-side re-entrancy guard (RecordWriter): set while a record is
  // being written so a signal handler on the same thread drops instead of
  // corrupting the ring. Here, on the line every push touches anyway.
  volatile sig_atomic_t producer_busy = 0;

 private:
  alignas(64) std::atomic<uint64_t> tail_{0};
  // Consumer-private: the buffer it reads now (buf_/capacity_ are the
  // producer's, which move ahead of it at a switch).
  uint8_t* c_buf_ = nullptr;
  size_t c_cap_ = 0;
  uint64_t skipped_ = 0;           // consumer-private: bytes of rewinds' jumps passed
  uint64_t unreadable_bytes_ = 0;  // consumer-private: SkipUnreadable's total
  // The last rewind's jump [from, to), written by the producer before the
  // Commit that publishes it; read by the consumer after head_.
  std::atomic<uint64_t> rewind_from_{kNoSwitch};
  std::atomic<uint64_t> rewind_to_{kNoSwitch};
  // Set by Init; read by both sides, written by neither after.
  uint8_t* base_buf_ = nullptr;
  size_t base_cap_ = 0;

  // Growth: written by the consumer once per Init (offer), by the producer
  // once (switch); off the push's line, read by the producer only at wraps.
  alignas(64) std::atomic<uint8_t*> offer_buf_{nullptr};
  size_t offer_cap_ = 0;                    // written by the offer's claimant before offer_buf_
  std::atomic<bool> offer_claimed_{false};  // ClaimOffer
  std::atomic<uint64_t> switch_pos_{kNoSwitch};
};

}  // namespace flightrec
