// Socket flush side: the record decoders and the periodic flush source of
// the sockets feature. Runs on the flush thread only.
//
//  * kRecSocketOp records become socket.op events at once, in drain order
//    (per thread batches: small time deltas and runs of equal tids compress
//    best in the columnar format).
//  * Both record kinds are also queued and, once per tick, sorted by
//    completion time and fed to the connection table (socket_conns.h) up to
//    the tick's start time: a connection used by several threads is then seen
//    in the order things happened, whatever order the rings were drained in.
//    When the tick passed over quiet threads' slots (preload/flush/slot_scan.h),
//    only up to the last full scan: a quiet thread may still hold a read on
//    a connection another thread has since closed (seen: the close's totals
//    missed the read).
//    A record whose completion time is before the tick started was committed
//    before its ring was drained (the push follows the clock read), except
//    when its thread was preempted in between for longer than a tick; such a
//    late record is still processed, just out of order.
//    Most records skip the queue: a data call on a connection whose
//    socket.open is already written only adds to its totals, which commute,
//    so it is counted on arrival (ConnTable::CountDataOpNow).
//  * Socket times (op start and end, hence durations and the request windows
//    flightrec-dump derives from them)
//    are rounded down to a 128 ns grid. The digits below that say little
//    about the call itself: the recorded interval brackets the real call with
//    the hook's own work (two clock reads, the push: 30-70 ns measured here),
//    and they were the largest part of a socket.op event on disk: on
//    redis-benchmark traffic, 4.3 -> 3.0 bytes per event at a 64 ns grain,
//    then 3.0 -> ~2.75 at 128 ns (with packed columns). socket.op's columns
//    are packed (SPEC.md 5.4), so the grid's zero bits are not stored.
//  * kRecSocketExchange records (socket_exchange.h: one per request/response
//    exchange, FLIGHTREC_SOCKETS=1) become socket.exchange events the same
//    way: written at once, then counted into their connection on arrival
//    when its socket.open is written, else queued with the rest.
//  * Data ops timed with the TSC (kOpFlagTsc) are converted to CLOCK_MONOTONIC
//    ns here, before anything else sees them (tsc_clock.h).
//  * Every FLIGHTREC_ACCEPTQ_MS the source samples the accept queues of our
//    listeners (socket_acceptq.h) into socket.acceptq events.
//  * No request events: flightrec-dump derives requests from socket.op and
//    socket.open (scripts/flightrec_lib/request_inference.py), which keeps
//    that work and a third event per request off the service's CPU. The
//    reader needs each connection's role: socket.open is written when the
//    connection's first data call is processed, and again at the start of
//    every segment while the connection lives, so the process's segments
//    together name the role of every connection their socket.op events use.
#pragma once
#include <cstdint>

#include "format/mi_containers.h"
#include "format/segment_writer.h"
#include "preload/sockets/decode/endpoint_classify.h"
#include "preload/sockets/decode/endpoint_names.h"
#include "preload/sockets/decode/socket_conns.h"
#include "preload/sockets/socket_records.h"

namespace flightrec {

struct Config;

inline constexpr uint64_t kSocketTimeGrainNs = 128;
inline uint64_t QuantizeSocketTime(uint64_t ns) { return ns & ~(kSocketTimeGrainNs - 1); }
// socket.exchange's times are on a 512 ns grid: an exchange's times are
// those of requests (tens of us and up), and its two time columns were
// nearly all of its bytes on disk: on redis-benchmark traffic 1.84 bytes per
// exchange for time and end at 128 ns, 1.29 at 512 ns (offline estimate
// over one recorded trace's columns).
inline constexpr uint64_t kExchangeTimeGrainNs = 512;
inline uint64_t QuantizeExchangeTime(uint64_t ns) { return ns & ~(kExchangeTimeGrainNs - 1); }

class SocketFlushSide {
 public:
  explicit SocketFlushSide(const ConnProbe& probe) : conns_(probe) {}

  // Decoder bodies. OnOp writes the socket.op event immediately.
  void OnOp(format::SegmentWriter* w, const SocketOpRecord& r, uint32_t tid);
  void OnAddr(const SocketAddrRecord& r, uint32_t tid);
  void OnGap(const SocketGapRecord& g, uint32_t tid);
  // An exchange record, times already in ns: writes socket.exchange at once.
  // `info`: the classified question when the record carried one (its name is
  // e.endpoint; the trace context is written from info).
  void OnExchange(format::SegmentWriter* w, const ExchangeEvent& e, uint32_t tid, const EndpointInfo* info = nullptr);

  // The endpoint side (issue 41): classifiers, names, trace context.
  void ConfigureEndpoints(unsigned mask, bool trace_context, size_t name_cap, const format::MiVector<SlowRule>* rules);
  // Names the question's bytes: sets e->endpoint and e->slow_ns, fills *info.
  void Classify(const uint8_t* p, size_t n, ExchangeEvent* e, EndpointInfo* info);
  EndpointNames& names() { return names_; }

  // Feeds queued records completed at or before watermark_ns (all of them
  // when final) to the connection table, in completion order.
  void Process(format::SegmentWriter* w, uint64_t watermark_ns, bool final);

  ConnTable& conns() { return conns_; }
  size_t queued() const { return pending_.size(); }
  // Bytes the queues hold for later records (their capacity).
  size_t queue_capacity_bytes() const {
    return pending_.capacity() * sizeof(Pending) + addrs_.capacity() * sizeof(SocketAddrRecord) +
           gaps_.capacity() * sizeof(SocketGapRecord) + exchanges_.capacity() * sizeof(ExchangeEvent);
  }

 private:
  struct Pending {
    uint64_t key;  // completion time
    uint64_t seq;  // arrival order: ties keep ring order (addr records before their op)
    uint32_t tid;
    uint32_t addr;  // index into addrs_ (or gaps_ with kGapBit), or kNoAddr for an op record
    SocketOpRecord op;
  };
  static constexpr uint32_t kNoAddr = ~0u;
  static constexpr uint32_t kGapBit = 1u << 31;
  static constexpr uint32_t kExchangeBit = 1u << 30;

  // The writer's string id of each op name (OpNameSlot in the .cc), 0 until
  // asked for: interning the same two dozen names for every event showed in
  // the flush thread's profile. Valid while op_ids_epoch_ is the writer's
  // string_epoch().
  static constexpr size_t kOpNameSlots = 2 * size_t(SockOp::kCount) + 1;
  uint32_t OpNameId(format::SegmentWriter* w, const SocketOpRecord& r);
  uint32_t op_ids_[kOpNameSlots] = {};
  uint64_t op_ids_epoch_ = 0;

  // Recent questions, byte for byte: a server's clients repeat the same
  // questions (redis-benchmark's "SET key:__rand_int__ ...", a health
  // check's whole request), and classifying and admitting the name again
  // was over a quarter of the flush thread's time per exchange
  // (flush_socket_bench). Classification is a pure function of the bytes
  // (with the mask and trace context, fixed until ConfigureEndpoints, which
  // clears the cache) and Admit gives a name the same index for good, so a
  // question equal to a remembered one gets the remembered answer. Only
  // answers without trace context or a request id (those come from the
  // bytes too, but are not worth keeping) and not from a capped Admit
  // (which counts each time) are remembered. Direct-mapped by a hash of the
  // length and a few words; fixed memory, no allocation.
  static constexpr size_t kRecentQuestions = 16;
  static constexpr size_t kRecentQuestionBytes = 256;
  struct RecentQuestion {
    uint32_t len = 0;  // 0: empty
    uint32_t endpoint = 0;
    uint32_t name_len = 0;
    char name[EndpointInfo::kMaxName + 1];
    uint8_t bytes[kRecentQuestionBytes];
  };
  static size_t RecentQuestionSlot(const uint8_t* p, size_t n);
  RecentQuestion recent_q_[kRecentQuestions];

  ConnTable conns_;
  EndpointNames names_{1000};
  unsigned classify_mask_ = 0;
  bool trace_context_ = false;
  format::MiVector<Pending> pending_;
  format::MiVector<SocketAddrRecord> addrs_;
  format::MiVector<SocketGapRecord> gaps_;
  format::MiVector<ExchangeEvent> exchanges_;
  uint64_t seq_ = 0;
};

// Registers event types, decoders, the flush source and the seal hook.
void RegisterSocketFlushSide(const Config& cfg);
// Describes every socket in the fd table that no record announced (adopted at
// init, or inherited); their socket.open events follow at the next tick.
// Single-threaded contexts only: init, and a fork child's handler.
void AdoptLiveSockets();
// In a fork child, before its flush thread starts: forget the parent's state
// (its containers may have been mid-update by the parent's flush thread) and
// adopt the inherited sockets.
void ResetSocketFlushSideAfterFork();

// A socket closed where our hooks cannot see it (a raw close syscall,
// fclose() of an fdopen()ed socket: glibc closes internally) leaves a stale
// fd-table entry, and reads and writes on whatever file later gets the number
// would be taken for socket calls. Clears the entries whose fd is no longer a
// socket (only if unchanged meanwhile); returns how many. Flush thread, every
// 10 s.
size_t HealStaleSocketEntries();

// The ConnProbe backed by the live fd table, getsockname/getpeername, fstat.
ConnProbe LiveConnProbe();

}  // namespace flightrec
