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
//  * Memory is supplied by the caller (mmap'd per thread); no allocation here.
#pragma once
#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace flightrec {

struct RecordHeader {
  uint16_t kind;   // RecordKind; 0 = padding
  uint16_t flags;
  uint32_t size;   // total bytes including this header, multiple of 8
};
static_assert(sizeof(RecordHeader) == 8);

class Ring {
 public:
  // capacity must be a power of two >= 64; buffer must be 8-byte aligned.
  void Init(uint8_t* buffer, size_t capacity) {
    buf_ = buffer;
    capacity_ = capacity;
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
    cached_tail_ = 0;
    pending_head_ = 0;
    nudged_ = false;
    nudge_pending_ = false;
  }
  size_t capacity() const { return capacity_; }
  uint8_t* buffer() const { return buf_; }

  // Producer: returns space for a record of `payload` bytes after the header,
  // or nullptr if the ring is full. Must be followed by Commit().
  void* Reserve(uint16_t kind, uint32_t payload) {
    const uint32_t size = static_cast<uint32_t>((sizeof(RecordHeader) + payload + 7) & ~size_t{7});
    if (size > capacity_ / 2) return nullptr;
    const uint64_t head = pending_head_;  // == head_ outside Reserve..Commit
    const size_t offset = head & (capacity_ - 1);
    const size_t to_end = capacity_ - offset;
    // Expectations keep the common push (no wrap, room) one straight run of
    // code: fewer instruction cache lines to fetch again after a syscall.
    const bool wraps = __builtin_expect(to_end < size, 0);
    uint64_t need = size;
    if (wraps) need += to_end;  // padding to the end, then the record at 0
    // Re-read the consumer's position only when the cached one says "over
    // a quarter full": keeps the consumer's cache line out of the common
    // path. Past a quarter for real, the consumer is nudged once; it is not
    // again until a re-read finds the ring at most a quarter full.
    if (__builtin_expect(head + need - cached_tail_ > capacity_ / 4, 0)) {
      cached_tail_ = tail_.load(std::memory_order_acquire);
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
      auto* pad = reinterpret_cast<RecordHeader*>(buf_ + offset);
      pad->kind = 0;
      pad->flags = 0;
      pad->size = static_cast<uint32_t>(to_end);
      pos += to_end;
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
    uint64_t tail = tail_.load(std::memory_order_relaxed);
    size_t n = 0;
    while (tail < head) {
      const auto* h = reinterpret_cast<const RecordHeader*>(buf_ + (tail & (capacity_ - 1)));
      const uint32_t size = h->size;
      if (size < sizeof(RecordHeader) || size > capacity_) break;  // cannot happen; stay safe
      if (h->kind != 0) {
        fn(*h, static_cast<const void*>(h + 1));
        ++n;
      }
      tail += size;
    }
    tail_.store(tail, std::memory_order_release);
    return n;
  }
  // Consumer: bytes consumed so far (its own position).
  uint64_t consumed() const { return tail_.load(std::memory_order_relaxed); }
  bool Empty() const {
    return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
  }

 private:
  // Everything a push touches shares one cache line (a hook around a system
  // call finds its lines evicted and pays for each one); the consumer reads
  // head_ here once per drain. tail_, which the consumer writes, has its own.
  alignas(64) uint8_t* buf_ = nullptr;
  size_t capacity_ = 0;
  // Producer-private: the committed head after Commit(), the reserved end
  // between Reserve() and Commit(). A failed Reserve leaves it unchanged.
  uint64_t pending_head_ = 0;
  uint64_t cached_tail_ = 0;   // producer-private; never ahead of tail_
  bool nudged_ = false;        // producer-private: this filling was reported
  bool nudge_pending_ = false; // producer-private: TakeNudge() answers true
  std::atomic<uint64_t> head_{0};

 public:
  // Producer-side re-entrancy guard (RecordWriter): set while a record is
  // being written so a signal handler on the same thread drops instead of
  // corrupting the ring. Here, on the line every push touches anyway.
  volatile sig_atomic_t producer_busy = 0;

 private:
  alignas(64) std::atomic<uint64_t> tail_{0};
};

}  // namespace flightrec
