// Socket gaps, the owner's side (see socket_gaps.h).
#include "preload/sockets/socket_gaps.h"

namespace flightrec {
namespace {

void Add(std::atomic<uint64_t>& v, uint64_t d) {
  v.store(v.load(std::memory_order_relaxed) + d, std::memory_order_release);
}

}  // namespace

void SummarizeDroppedDataOp(SockGapTable& t, uint64_t conn, uint64_t bytes_in, uint64_t bytes_out, bool error,
                            uint64_t end_ns) {
  SummarizeDroppedCalls(t, conn, bytes_in, bytes_out, 1, error ? 1 : 0, end_ns);
}

__attribute__((noinline)) void SummarizeDroppedCalls(SockGapTable& t, uint64_t conn, uint64_t bytes_in,
                                                     uint64_t bytes_out, uint64_t ops, uint64_t errors,
                                                     uint64_t end_ns) {
  if (t.owner_busy) {  // a signal handler interrupted the owner in here
    Add(t.unsummarized, ops);
    Add(t.changes, 1);
    return;
  }
  t.owner_busy = 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // The connection's entry, else one the reader has finished with.
  SockGapEntry* slot = nullptr;
  for (SockGapEntry& e : t.entries) {
    if (e.conn.load(std::memory_order_relaxed) == conn) {
      slot = &e;
      break;
    }
  }
  bool fresh = false;
  if (!slot) {
    for (SockGapEntry& e : t.entries) {
      if (e.conn.load(std::memory_order_relaxed) == 0 ||
          e.acked_ops.load(std::memory_order_acquire) == e.ops.load(std::memory_order_relaxed)) {
        slot = &e;
        fresh = true;
        break;
      }
    }
  }
  if (!slot) {
    Add(t.unsummarized, ops);
  } else {
    const uint32_t s = slot->seq.load(std::memory_order_relaxed);
    slot->seq.store(s + 1, std::memory_order_relaxed);
    if (fresh) slot->conn.store(conn, std::memory_order_release);  // counters carry on (see the header)
    Add(slot->bytes_in, bytes_in);
    Add(slot->bytes_out, bytes_out);
    Add(slot->ops, ops);
    Add(slot->errors, errors);
    slot->last_ns.store(end_ns, std::memory_order_release);
    slot->seq.store(s + 2, std::memory_order_release);
  }
  Add(t.changes, 1);  // after the entry: a reader that sees it sees the entry's values
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t.owner_busy = 0;
}

}  // namespace flightrec
