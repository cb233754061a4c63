// Connection table (flush thread only): the state of every connection the
// socket hooks told us about — role, addresses, open fds, byte and op totals —
// fed with socket records in completion order. It emits socket.open,
// socket.close and socket.gap events; socket.op events are written by the
// record decoders in socket_flush.cc, not here. (Requests are not inferred
// here: flightrec-dump derives them from socket.op, request_inference.py.)
//
// Invariants:
//  * Single-threaded: only the flush thread (or a unit test) calls in.
//  * Memory comes from mimalloc (format/mi_containers.h), never the host heap.
//  * A connection's state exists from its first record until its last fd is
//    closed (or it is found stale: its fd no longer names it and it has been
//    idle for a while — a close we could not see, e.g. a dropped record).
//  * socket.open is written once per connection per segment, before any
//    socket.close of that connection in the segment, and before its first
//    data call's socket.op is processed here.
#pragma once
#include <cstdint>

#include "format/mi_containers.h"
#include "format/segment_writer.h"
#include "preload/sockets/socket_fd_table.h"
#include "preload/sockets/socket_records.h"

namespace flightrec {

// What the table needs from the live process; replaceable in unit tests.
struct ConnProbe {
  // Describes a connection first seen in the middle of its life (created
  // before init, in our parent before fork, or whose creation record was
  // dropped). Returns false if fd no longer names conn.
  bool (*adopt)(int fd, uint64_t conn, uint8_t* role, uint8_t* family, uint8_t* type, char* local, char* peer,
                size_t cap) = nullptr;
  // The socket inode of a listener (for accept-queue sampling), 0 if unknown.
  uint64_t (*inode)(int fd, uint64_t conn) = nullptr;
  // True while fd still names conn in the fd table.
  bool (*alive)(int fd, uint64_t conn) = nullptr;
};

// A socket.exchange as the flush thread decoded it (socket_exchange.h):
// times in CLOCK_MONOTONIC ns on the socket grid.
struct ExchangeEvent {
  uint64_t time = 0, ask_ns = 0, answer_ns = 0, end_ns = 0;
  uint64_t conn = 0, bytes_in = 0, bytes_out = 0;
  uint32_t calls_in = 0, calls_out = 0, errors = 0, would_block = 0;
  int32_t fd = -1;
  uint32_t tid = 0;
  uint16_t flags = 0;
  uint32_t endpoint = 0;  // the process's endpoint name index (endpoint_names.h), 0: none
  uint64_t slow_ns = 0;   // FLIGHTREC_TRIGGER_SLOW_MS for this exchange's endpoint (0: never)
  uint64_t end() const { return end_ns; }
};

struct ListenerInfo {
  uint64_t conn;
  int32_t fd;
  uint64_t inode;
  const char* local;
};

class ConnTable {
 public:
  explicit ConnTable(const ConnProbe& probe) : probe_(probe) {}

  void OnOp(format::SegmentWriter* w, const SocketOpRecord& r, uint32_t tid);
  // A data call (send/recv/read/write families) on a connection whose
  // socket.open is already in this segment only adds to its totals, and
  // additions commute: it can be counted on arrival instead of waiting its
  // turn in SocketFlushSide's completion-ordered queue. Returns false (and
  // does nothing) for any other record, which must go through OnOp in order.
  bool CountDataOpNow(const SocketOpRecord& r);
  // Takes in a connection found in the fd table that no record will announce
  // (open before init, or inherited from the parent in a fork child): its
  // state now, while the fd is surely open; its socket.open at the next
  // AnnounceAdopted. No-op if known.
  void AdoptLive(uint64_t conn, int fd, uint64_t time_ns);
  void AnnounceAdopted(format::SegmentWriter* w);
  void OnAddr(format::SegmentWriter* w, const SocketAddrRecord& r, uint32_t tid);
  // Data calls whose records were dropped (socket_gaps.h): writes socket.gap
  // and adds them to the connection's totals.
  void OnGap(format::SegmentWriter* w, const SocketGapRecord& g, uint32_t tid);
  // An exchange record: its calls' share of the connection's totals, its
  // socket.open if not written yet, and the slow-exchange trigger.
  void OnExchange(format::SegmentWriter* w, const ExchangeEvent& e, uint32_t tid);
  // The same when its connection's socket.open is already in this segment
  // (additions commute, as CountDataOpNow); false otherwise.
  bool CountExchangeNow(const ExchangeEvent& e);

  // A new segment began: socket.open again for every connection already described.
  void NewSegment(format::SegmentWriter* w);
  // Drops connections whose fd no longer names them and that were idle since before idle_before_ns.
  size_t EvictStale(uint64_t idle_before_ns);

  template <typename Fn>
  void ForEachListener(Fn&& fn) {
    for (auto& [id, c] : conns_)
      if (c.role == uint8_t(sockfd::SockRole::kListener)) fn(ListenerInfo{id, c.fd, c.inode, c.local.c_str()});
  }

  size_t size() const { return conns_.size(); }

 private:
  struct Conn {
    uint64_t parent = 0;
    uint64_t created_ns = 0, last_ns = 0;
    uint64_t bytes_in = 0, bytes_out = 0, ops = 0, errors = 0;
    uint64_t inode = 0;
    int32_t fd = -1;
    int32_t fd_refs = 1;
    uint32_t tid = 0;
    uint8_t role = 0, family = 0, type = 0;
    bool open_emitted = false;  // in the current segment
    bool announce = false;      // adopted: socket.open still to be written
    // The exchange in progress on a server connection (a receive run, then a
    // send run), for FLIGHTREC_TRIGGER_SLOW_MS: it starts when the first
    // receive returns data, as request_inference.py counts it.
    uint8_t exchange = 0;         // 0 idle, 1 receiving, 2 answering
    bool exchange_fired = false;  // this exchange already triggered
    uint64_t exchange_start_ns = 0;
    uint64_t exchange_slow_ns = 0;  // its threshold (per endpoint: its first part's)
    format::MiString local, peer;
  };

  Conn* Find(uint64_t conn);
  // A call's share of the connection's totals (ops, errors, bytes, last_ns),
  // and of its exchange (SlowExchange).
  static void Count(Conn& c, const SocketOpRecord& r);
  // A server connection's send that makes its exchange slower than
  // FLIGHTREC_TRIGGER_SLOW_MS asks for a trigger (once per exchange).
  static void TrackExchange(Conn& c, const SocketOpRecord& r);
  // The same from an exchange record (FLIGHTREC_SOCKETS=1): its answer ends
  // the exchange's time so far; parts of one exchange (kExCont) keep its start.
  static void TrackExchange(Conn& c, const ExchangeEvent& e);
  static void CountExchange(Conn& c, const ExchangeEvent& e);
  Conn* Adopt(uint64_t conn, int fd, uint64_t time_ns, uint32_t tid);
  void SetRole(Conn& c, uint8_t role);
  void EmitOpen(format::SegmentWriter* w, uint64_t id, Conn& c);
  void Close(format::SegmentWriter* w, uint64_t id, Conn& c, const SocketOpRecord& r, uint32_t tid);

  ConnProbe probe_;
  format::MiHashMap<uint64_t, Conn> conns_;
  // Find's recent answers, direct-mapped by the id's low bits (ids are
  // handed out in sequence, so live connections rarely share a slot): a
  // server's calls cycle over its busy connections, and the hash lookup was
  // a noticeable part of the flush thread's time per event. A slot is
  // cleared wherever its entry is erased (Forget).
  struct Recent {
    uint64_t id = 0;
    Conn* conn = nullptr;
  };
  static constexpr size_t kRecent = 64;
  Recent recent_[kRecent];
  void Forget(uint64_t id) {
    Recent& r = recent_[id % kRecent];
    if (r.id == id) r = Recent{};
  }
};

const char* SockRoleName(uint8_t role);
const char* SockFamilyName(uint8_t family);
const char* SockTypeName(uint8_t type);

}  // namespace flightrec
