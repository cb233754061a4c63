// Socket gaps: exact per-connection totals when socket.op records are dropped.
//
// A data call (send/recv family) whose record does not fit the thread's ring
// is not forgotten: the owning thread adds its bytes, op and error to this
// small per-thread table (one entry per connection), and the flush thread,
// after draining that thread's ring, turns what it finds into socket.gap
// events and adds it to the connection's totals (so socket.close and
// `flightrec-dump sockets` stay exact). The calls' timing and the requests
// inferred from them are lost with the records, and counted as dropped.
//
// Concurrency: one writer (the owning thread; a signal handler that
// interrupts it is turned away by owner_busy) and one reader (the flush
// thread). Each entry is a seqlock: the writer makes seq odd, updates, makes
// it even; the reader retries on its next tick when seq moved. The fields
// are stored with release and loaded with acquire (no standalone fences, so
// ThreadSanitizer follows it): a reader that sees any new value also sees
// seq moved when it checks again. Counters only
// grow, also across a change of connection: an entry goes to another
// connection only once the reader has reported all of it (acked_ops == ops,
// acked_ops written by the reader alone), so whatever the reader finds
// beyond what it reported belongs to the entry's current connection. No
// entry free: the call is counted in `unsummarized` (totals are lower bounds).
//
// Where: the thread's producer slot kSlotSocketGaps (producer_slots.h),
// kept with the slot, so the flush thread harvests a table whose thread has
// exited too; SocketGapsOf(ts) below.
#pragma once
#include <atomic>
#include <cstdint>

#include "preload/threads/thread_registry.h"

namespace flightrec {

struct SockGapEntry {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint64_t> conn{0}, bytes_in{0}, bytes_out{0}, ops{0}, errors{0}, last_ns{0};
  std::atomic<uint64_t> acked_ops{0};  // written by the reader
};

struct SockGapTable {
  static constexpr int kEntries = 32;
  SockGapEntry entries[kEntries];
  uint8_t owner_busy = 0;                 // owner only
  std::atomic<uint64_t> unsummarized{0};  // owner writes, reader reads
  // Bumped (release) by the owner after each call it summarizes, so the
  // reader can pass over a table nothing was added to with one load instead
  // of reading all its entries, every thread's, every tick: those are cache
  // misses paid per wake-up even when nothing is ever dropped.
  std::atomic<uint64_t> changes{0};
  // Reader (flush thread) private: what it has reported of each entry.
  struct Reported {
    uint64_t bytes_in = 0, bytes_out = 0, ops = 0, errors = 0;
  } reported[kEntries];
  uint64_t unsummarized_reported = 0;
  uint64_t changes_harvested = 0;  // `changes` as of the last harvest that read every entry
};

// The thread's table (its producer slot).
inline SockGapTable& SocketGapsOf(ThreadState* ts) { return ProducerSlot<SockGapTable, kSlotSocketGaps>(ts); }

// last_ns holds the dropped call's end in the unit its hook read: CLOCK_MONOTONIC
// ns, or TSC ticks with this bit set (tsc_clock.h; neither reaches 2^63).
inline constexpr uint64_t kGapTimeIsTsc = 1ull << 63;

// Owner thread, when a data op's record was dropped. Lock-free, no calls.
// in/out: bytes moved in each direction (0 for an error or a peek).
void SummarizeDroppedDataOp(SockGapTable& t, uint64_t conn, uint64_t bytes_in, uint64_t bytes_out, bool error,
                            uint64_t end_ns);
// The same for several calls at once (a dropped socket.exchange record:
// socket_exchange.h). ops must be > 0.
void SummarizeDroppedCalls(SockGapTable& t, uint64_t conn, uint64_t bytes_in, uint64_t bytes_out, uint64_t ops,
                           uint64_t errors, uint64_t end_ns);

// Reader: calls fn(conn, bytes_in, bytes_out, ops, errors, last_ns) with what
// was added since the last harvest, for each entry that reads consistently.
// Returns the dropped ops no entry could take since the last call.
template <typename Fn>
uint64_t HarvestSocketGaps(SockGapTable& t, Fn fn) {
  const uint64_t changes = t.changes.load(std::memory_order_acquire);
  if (changes == t.changes_harvested) return 0;  // nothing summarized since
  bool complete = true;                          // every entry read consistently: `changes` is harvested
  for (int i = 0; i < SockGapTable::kEntries; ++i) {
    SockGapEntry& e = t.entries[i];
    const uint32_t s1 = e.seq.load(std::memory_order_acquire);
    if (s1 & 1) {
      complete = false;
      continue;
    }
    const uint64_t conn = e.conn.load(std::memory_order_acquire);
    const uint64_t in = e.bytes_in.load(std::memory_order_acquire);
    const uint64_t out = e.bytes_out.load(std::memory_order_acquire);
    const uint64_t ops = e.ops.load(std::memory_order_acquire);
    const uint64_t errors = e.errors.load(std::memory_order_acquire);
    const uint64_t last = e.last_ns.load(std::memory_order_acquire);
    if (e.seq.load(std::memory_order_relaxed) != s1) {  // being written: next tick
      complete = false;
      continue;
    }
    SockGapTable::Reported& r = t.reported[i];
    if (ops == r.ops) continue;
    if (conn) fn(conn, in - r.bytes_in, out - r.bytes_out, ops - r.ops, errors - r.errors, last);
    r.bytes_in = in;
    r.bytes_out = out;
    r.ops = ops;
    r.errors = errors;
    e.acked_ops.store(ops, std::memory_order_release);
  }
  const uint64_t un = t.unsummarized.load(std::memory_order_relaxed);
  const uint64_t delta = un - t.unsummarized_reported;
  t.unsummarized_reported = un;
  if (complete) t.changes_harvested = changes;
  return delta;
}

}  // namespace flightrec
