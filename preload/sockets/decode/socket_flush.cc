// Socket flush side (see socket_flush.h).
#include "preload/sockets/decode/socket_flush.h"

#include <mimalloc.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>

#include "preload/fds/own_fd_table.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/config.h"
#include "preload/flush/drop_ledger.h"
#include "preload/runtime/core_events.h"
#include "preload/flush/flush_registry.h"
#include "preload/runtime/log.h"
#include "preload/threads/record_kinds.h"
#include "preload/sockets/decode/socket_acceptq.h"
#include "preload/sockets/decode/socket_addr_format.h"
#include "preload/runtime/tsc_clock.h"
#include "preload/sockets/socket_exchange.h"
#include "preload/sockets/decode/socket_events.h"
#include "preload/sockets/socket_fd_table.h"
#include "preload/sockets/socket_prefix.h"
#include "preload/threads/thread_registry.h"

namespace flightrec {

using format::Value;

namespace {
// MSG_PEEK receives get their own op names: their bytes were not consumed.
// string_views (lengths known at compile time, socket_records.h): this runs
// once per recorded call, and a strlen per event showed in the flush
// thread's profile.
std::string_view OpName(const SocketOpRecord& r) {
  using namespace std::string_view_literals;
  if (r.flags & kOpFlagPeek) {
    switch (SockOp(r.op)) {
      case SockOp::kRecv: return "recv.peek"sv;
      case SockOp::kRecvfrom: return "recvfrom.peek"sv;
      case SockOp::kRecvmsg: return "recvmsg.peek"sv;
      case SockOp::kRecvmmsg: return "recvmmsg.peek"sv;
      default: break;
    }
  }
  return r.op < uint8_t(SockOp::kCount) ? kSockOpNames[r.op] : "unknown"sv;
}

// One slot per name OpName can return (a peek flag on an op with no peek
// name gets a slot of its own holding the plain name's id).
size_t OpNameSlot(const SocketOpRecord& r) {
  constexpr size_t kCount = size_t(SockOp::kCount);
  if (r.op >= kCount) return 2 * kCount;
  return (r.flags & kOpFlagPeek) ? kCount + r.op : r.op;
}
}  // namespace

uint32_t SocketFlushSide::OpNameId(format::SegmentWriter* w, const SocketOpRecord& r) {
  if (op_ids_epoch_ != w->string_epoch()) {
    op_ids_epoch_ = w->string_epoch();
    std::fill(std::begin(op_ids_), std::end(op_ids_), 0u);
  }
  uint32_t& id = op_ids_[OpNameSlot(r)];
  if (id == 0) id = w->StringId(OpName(r));  // names are never empty: 0 is "not asked yet"
  return id;
}

void SocketFlushSide::OnOp(format::SegmentWriter* w, const SocketOpRecord& raw, uint32_t tid) {
  // Start and end on the kSocketTimeGrainNs grid (see socket_flush.h).
  SocketOpRecord r = raw;
  const uint64_t end = QuantizeSocketTime(raw.start_ns + raw.duration_ns);
  r.start_ns = QuantizeSocketTime(raw.start_ns);
  r.duration_ns = end - r.start_ns;
  // socket.op's fields (socket_events.cc) as column values.
  const uint64_t columns[] = {r.start_ns,
                              tid,
                              static_cast<uint64_t>(r.fd < 0 ? 0 : r.fd),
                              r.conn,
                              OpNameId(w, r),
                              static_cast<uint64_t>(r.result),
                              r.duration_ns};
  w->AppendColumns(g_socket_types.op, columns, 7);
  if (r.conn == 0) return;               // failed socket(): nothing to track
  if (conns_.CountDataOpNow(r)) return;  // most calls: totals only, no queueing
  pending_.push_back(Pending{end, seq_++, tid, kNoAddr, r});
}

void SocketFlushSide::OnAddr(const SocketAddrRecord& raw, uint32_t tid) {
  SocketAddrRecord r = raw;
  r.time_ns = QuantizeSocketTime(raw.time_ns);
  Pending p{r.time_ns, seq_++, tid, static_cast<uint32_t>(addrs_.size()), SocketOpRecord{}};
  addrs_.push_back(r);
  pending_.push_back(p);
}

void SocketFlushSide::OnGap(const SocketGapRecord& g, uint32_t tid) {
  SocketGapRecord q = g;
  q.time_ns = QuantizeSocketTime(g.time_ns);
  pending_.push_back(Pending{q.time_ns, seq_++, tid, kGapBit | static_cast<uint32_t>(gaps_.size()), SocketOpRecord{}});
  gaps_.push_back(q);
}

void SocketFlushSide::ConfigureEndpoints(unsigned mask, bool trace_context, size_t name_cap,
                                         const format::MiVector<SlowRule>* rules) {
  classify_mask_ = mask;
  trace_context_ = trace_context;
  names_.~EndpointNames();
  new (&names_) EndpointNames(name_cap);
  names_.SetSlowRules(rules);
  for (RecentQuestion& q : recent_q_) q.len = 0;  // the answers were the old classifiers' and names'
}

size_t SocketFlushSide::RecentQuestionSlot(const uint8_t* p, size_t n) {
  // The length, the first, middle and last 8 bytes (the two ends overlap
  // under 16 bytes), mixed by one multiply; n > 0.
  uint64_t a = 0, b = 0, c = 0;
  if (n >= 8) {
    memcpy(&a, p, 8);
    memcpy(&b, p + (n - 8) / 2, 8);
    memcpy(&c, p + n - 8, 8);
  } else {
    for (size_t i = 0; i < n; ++i) a = a << 8 | p[i];
  }
  const uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ull) ^ (c * 0xc2b2ae3d27d4eb4full) ^ n) * 0xff51afd7ed558ccdull;
  return static_cast<size_t>(h >> 60);  // kRecentQuestions = 16 slots
}

void SocketFlushSide::Classify(const uint8_t* p, size_t n, ExchangeEvent* e, EndpointInfo* info) {
  static_assert(kRecentQuestions == 16, "RecentQuestionSlot returns 4 bits");
  RecentQuestion* q = nullptr;
  if (p && n > 0 && n <= kRecentQuestionBytes) {
    q = &recent_q_[RecentQuestionSlot(p, n)];
    if (q->len == n && memcmp(q->bytes, p, n) == 0) {
      // What ClassifyQuestion and Admit gave these bytes before.
      memcpy(info->name, q->name, sizeof(q->name));  // a fixed size: inline moves, no libc call
      info->name_len = q->name_len;
      info->has_trace = false;
      info->trace_hi = info->trace_lo = info->parent_span = 0;
      info->trace_flags = 0;
      info->request_id_len = 0;
      e->endpoint = q->endpoint;
      e->slow_ns = names_.SlowNs(e->endpoint);
      return;
    }
  }
  ClassifyQuestion(p, n, classify_mask_, trace_context_, info);
  const uint64_t capped_before = names_.capped();
  e->endpoint = names_.Admit(info->Name());
  e->slow_ns = names_.SlowNs(e->endpoint);
  if (q && names_.capped() == capped_before && !info->has_trace && info->request_id_len == 0) {
    q->len = static_cast<uint32_t>(n);
    memcpy(q->bytes, p, n);
    q->endpoint = e->endpoint;
    q->name_len = static_cast<uint32_t>(info->name_len);
    memcpy(q->name, info->name, info->name_len);
    q->name[info->name_len] = 0;
  }
}

void SocketFlushSide::OnExchange(format::SegmentWriter* w, const ExchangeEvent& e, uint32_t tid,
                                 const EndpointInfo* info) {
  uint64_t hi = 0, lo = 0, span = 0, tflags = 0, rid = 0;
  if (info && info->has_trace) {
    hi = info->trace_hi;
    lo = info->trace_lo;
    span = info->parent_span;
    tflags = info->trace_flags;
  }
  if (info && info->request_id_len) rid = w->StringId(info->RequestId());
  // socket.exchange's fields (socket_events.cc) as column values.
  const uint64_t columns[] = {e.time,
                              e.tid ? e.tid : tid,
                              static_cast<uint64_t>(e.fd < 0 ? 0 : e.fd),
                              e.conn,
                              e.flags,
                              e.bytes_in,
                              e.bytes_out,
                              e.calls_in,
                              e.calls_out,
                              e.errors,
                              e.would_block,
                              e.ask_ns,
                              e.answer_ns,
                              e.end_ns,
                              names_.StringId(w, e.endpoint),
                              hi,
                              lo,
                              span,
                              tflags,
                              rid};
  w->AppendColumns(g_socket_types.exchange, columns, 20);
  if (e.conn == 0 || conns_.CountExchangeNow(e)) return;
  pending_.push_back(
      Pending{e.end(), seq_++, tid, kExchangeBit | static_cast<uint32_t>(exchanges_.size()), SocketOpRecord{}});
  exchanges_.push_back(e);
}

namespace {

// Empties a queue. The queues hold what waits for a connection's open (the
// first exchanges of new connections, a few hundred KiB when a client opens
// many at once); a burst's capacity past this goes back to the heap instead
// of staying with the process for its life (issue #44). Below it, the
// capacity is kept for the next burst.
constexpr size_t kKeepQueueBytes = 64 << 10;
template <typename Vec>
void ClearQueue(Vec& v) {
  if (v.capacity() * sizeof(typename Vec::value_type) > kKeepQueueBytes) Vec().swap(v);
  else v.clear();
}

}  // namespace

void SocketFlushSide::Process(format::SegmentWriter* w, uint64_t watermark_ns, bool final) {
  if (!pending_.empty()) {
    auto before = [](const Pending& a, const Pending& b) { return a.key != b.key ? a.key < b.key : a.seq < b.seq; };
    // Usually in order already (one thread's ring, drained in push order):
    // checking is one pass, sorting several.
    if (!std::is_sorted(pending_.begin(), pending_.end(), before)) std::sort(pending_.begin(), pending_.end(), before);
    size_t done = 0;
    for (; done < pending_.size(); ++done) {
      const Pending& p = pending_[done];
      if (!final && p.key > watermark_ns) break;
      if (p.addr == kNoAddr) {
        conns_.OnOp(w, p.op, p.tid);
      } else if (p.addr & kExchangeBit) {
        conns_.OnExchange(w, exchanges_[p.addr & ~kExchangeBit], p.tid);
      } else if (p.addr & kGapBit) {
        conns_.OnGap(w, gaps_[p.addr & ~kGapBit], p.tid);
      } else {
        conns_.OnAddr(w, addrs_[p.addr], p.tid);
      }
    }
    if (done == pending_.size()) {
      ClearQueue(pending_);
      ClearQueue(addrs_);
      ClearQueue(gaps_);
      ClearQueue(exchanges_);
    } else if (done > 0) {
      // Keep the rest; compact the address and gap records they still refer to.
      format::MiVector<SocketAddrRecord> kept;
      format::MiVector<SocketGapRecord> kept_gaps;
      format::MiVector<ExchangeEvent> kept_exchanges;
      for (size_t i = done; i < pending_.size(); ++i) {
        Pending& p = pending_[i];
        if (p.addr == kNoAddr) continue;
        if (p.addr & kExchangeBit) {
          kept_exchanges.push_back(exchanges_[p.addr & ~kExchangeBit]);
          p.addr = kExchangeBit | static_cast<uint32_t>(kept_exchanges.size() - 1);
        } else if (p.addr & kGapBit) {
          kept_gaps.push_back(gaps_[p.addr & ~kGapBit]);
          p.addr = kGapBit | static_cast<uint32_t>(kept_gaps.size() - 1);
        } else {
          kept.push_back(addrs_[p.addr]);
          p.addr = static_cast<uint32_t>(kept.size() - 1);
        }
      }
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(done));
      addrs_.swap(kept);
      gaps_.swap(kept_gaps);
      exchanges_.swap(kept_exchanges);
    }
  }
}

// ---- the live process ------------------------------------------------------

namespace {

bool Names(int fd, uint64_t conn) { return conn && sockfd::EntryConn(sockfd::Lookup(fd)) == conn; }

bool LiveAdopt(int fd, uint64_t conn, uint8_t* role, uint8_t* family, uint8_t* type, char* local, char* peer,
               size_t cap) {
  const uint64_t e = sockfd::Lookup(fd);
  if (!conn || sockfd::EntryConn(e) != conn) return false;
  const ProgramFd sock(fd);  // the program's socket, from this thread's table (own_fd_table.h)
  if (sock.fd() < 0) return false;
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(sock.fd(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) FormatSockaddr(&ss, len, local, cap);
  len = sizeof(ss);
  if (getpeername(sock.fd(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) FormatSockaddr(&ss, len, peer, cap);
  // Still the same socket after our calls? (Closed and reused meanwhile: a new id.)
  if (sockfd::EntryConn(sockfd::Lookup(fd)) != conn) return false;
  *role = static_cast<uint8_t>(sockfd::EntryRole(e));
  *family = static_cast<uint8_t>(sockfd::EntryFamily(e));
  *type = static_cast<uint8_t>(sockfd::EntryType(e));
  return true;
}

uint64_t LiveInode(int fd, uint64_t conn) {
  if (!Names(fd, conn)) return 0;
  const ProgramFd sock(fd);
  struct stat st;
  if (sock.fd() < 0 || fstat(sock.fd(), &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return Names(fd, conn) ? static_cast<uint64_t>(st.st_ino) : 0;
}

constexpr uint64_t kMs = 1000000ull;
constexpr uint64_t kEvictEveryNs = 10000 * kMs;
constexpr uint64_t kEvictIdleNs = 30000 * kMs;

struct FlushGlobals {
  SocketFlushSide* side = nullptr;
  ListenQueueProbe* acceptq = nullptr;
  uint64_t acceptq_ns = 0;
  uint64_t next_acceptq_ns = 0;
  uint64_t next_evict_ns = 0;
  uint64_t beyond_reported = 0;
  bool acceptq_failed_logged = false;
  bool names_capped_logged = false;
  uint64_t names_capped_reported = 0;
  format::MiVector<SlowRule> slow_rules;
  bool atexit_registered = false;
  bool stale_logged = false;
  format::MiVector<ListenQueue> queues;
};

FlushGlobals* g_flush = nullptr;
std::atomic<bool> g_new_segment{false};
std::atomic<uint64_t> g_finalize_ns{0};  // when exit() began (0: not exiting)
std::atomic<bool> g_adopted_pending{false};

template <typename T, typename... Args>
T* MiNew(Args&&... args) {
  void* p = mi_malloc(sizeof(T));
  return p ? new (p) T(std::forward<Args>(args)...) : nullptr;
}

void MakeGlobals(uint64_t acceptq_ms) {
  // The previous globals (a fork child's copy of the parent's) are leaked on purpose.
  g_flush = MiNew<FlushGlobals>();
  if (!g_flush) return;
  g_flush->acceptq_ns = acceptq_ms * kMs;
}

// The connection table, endpoint names and accept-queue probe are made when
// the process first has a socket to describe (a record, a gap, a socket it
// was started or forked with), not at start: a process that never touches a
// socket, /bin/true or a compiler, does not pay the ~15 page faults of
// making them (issue #39). Made on the flush thread, or before it runs (at
// start, in a fork child): only the flush thread reads them afterwards.
SocketFlushSide* SideOrMake() {
  FlushGlobals* g = g_flush;
  if (!g) return nullptr;
  if (g->side) return g->side;
  if (!g->acceptq) g->acceptq = MiNew<ListenQueueProbe>();
  if (!g->acceptq) return nullptr;  // out of memory: no side; tried again at the next socket
  g->side = MiNew<SocketFlushSide>(LiveConnProbe());
  if (!g->side) return nullptr;
  // The endpoint side (issue 41) from the configuration.
  const Config& cfg = GetConfig();
  unsigned mask = 0;
  if (!ParseEndpointClassifiers(cfg.endpoints, &mask)) mask = kClassifyAll;
  uint64_t least = 0;
  if (!cfg.trigger_slow_rules.empty()) ParseSlowRules(cfg.trigger_slow_rules, &g->slow_rules, &least);
  else ParseSlowRules(std::to_string(cfg.trigger_slow_ms), &g->slow_rules, &least);
  g->side->ConfigureEndpoints(mask, cfg.trace_context, cfg.endpoint_names, &g->slow_rules);
  return g->side;
}

uint32_t TidOf(const FlushContext& ctx) { return ctx.thread ? static_cast<uint32_t>(ctx.thread->tid) : 0; }

void DecodeOp(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  if (h.size < sizeof(RecordHeader) + sizeof(SocketOpRecord) || !SideOrMake()) return;
  SocketOpRecord r;
  memcpy(&r, payload, sizeof(r));
  if (r.flags & kOpFlagTsc) {  // TSC ticks -> CLOCK_MONOTONIC ns (tsc_clock.h)
    uint64_t start, end;
    tscclock::TickSpanToNs(r.start_ns, r.duration_ns, ctx.now_ns, &start, &end);
    r.start_ns = start;
    r.duration_ns = end > start ? end - start : 0;
    r.flags = static_cast<uint8_t>(r.flags & ~kOpFlagTsc);
  }
  g_flush->side->OnOp(ctx.writer, r, TidOf(ctx));
}

void OnExchangeRecord(FlushContext& ctx, const SocketExchangeRecord& r, uint32_t ring_tid, const uint8_t* prefix);

void DecodeExchange(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  if (h.size < sizeof(RecordHeader) + sizeof(SocketExchangeRecord) || !SideOrMake()) return;
  SocketExchangeRecord r;
  memcpy(&r, payload, sizeof(r));
  // The question's first bytes follow the record (socket_prefix.h), if the
  // record's size holds them all.
  const size_t room = h.size - sizeof(RecordHeader) - sizeof(SocketExchangeRecord);
  if (r.prefix_len > room) r.prefix_len = 0;
  OnExchangeRecord(ctx, r, TidOf(ctx), static_cast<const uint8_t*>(payload) + sizeof(SocketExchangeRecord));
}

// At the process's end: exchanges still in their descriptors' slots (a
// server that exits without closing its connections: redis's SHUTDOWN) are
// written from the slots, before the final drain's records are processed.
void SweepExchangeSlots(FlushContext& ctx) {
  if (!sockex::On()) return;
  const int hw = sockfd::HighWater();
  SocketExchangeRecord r;
  uint8_t prefix[sockpfx::kCapTraceContext];
  for (int fd = 0; fd < hw; ++fd)
    if (sockex::TakeForFlush(fd, &r, prefix, sizeof(prefix))) OnExchangeRecord(ctx, r, 0, prefix);
}

void OnExchangeRecord(FlushContext& ctx, const SocketExchangeRecord& r, uint32_t ring_tid, const uint8_t* prefix) {
  const bool tsc = (r.flags & kExTsc) != 0;
  // The five times in CLOCK_MONOTONIC ns on the socket grid (0 stays 0).
  uint64_t t[5] = {r.ask_begin, r.ask_end, r.ans_begin, r.ans_end, r.at};
  if (tsc) tscclock::TicksToNsInPlace(t, 5, ctx.now_ns);
  for (uint64_t& v : t) v = QuantizeExchangeTime(v);
  const uint64_t ask_begin = t[0], ask_end = t[1], ans_begin = t[2], ans_end = t[3];
  ExchangeEvent e;
  e.conn = r.conn;
  e.fd = r.fd;
  e.tid = r.tid;
  e.flags = static_cast<uint16_t>(r.flags & ~kExTsc);
  e.bytes_in = r.bytes_in;
  e.bytes_out = r.bytes_out;
  e.calls_in = r.calls_in;
  e.calls_out = r.calls_out;
  e.errors = r.errors;
  e.would_block = r.would_block;
  if (ask_end) {
    e.time = ask_begin;
    e.ask_ns = ask_end > ask_begin ? ask_end - ask_begin : 0;
    e.end_ns = ask_end;
    if (ans_end) {
      e.end_ns = std::max(ans_end, ask_end);
      e.answer_ns = ans_end > ans_begin ? ans_end - ans_begin : 0;
    }
  } else if (ans_end) {
    e.time = ans_begin;
    e.answer_ns = ans_end > ans_begin ? ans_end - ans_begin : 0;
    e.end_ns = ans_end;
  } else {
    e.time = e.end_ns = t[4] ? t[4] : QuantizeExchangeTime(ctx.now_ns);
  }
  if (e.end_ns < e.time) e.end_ns = e.time;
  SocketFlushSide& side = *g_flush->side;
  if (r.prefix_len && prefix) {
    EndpointInfo info;
    const size_t capped_before = side.names().capped();
    side.Classify(prefix, r.prefix_len, &e, &info);
    if (side.names().capped() != capped_before && !g_flush->names_capped_logged) {
      g_flush->names_capped_logged = true;
      Log(LogLevel::kWarn,
          "endpoint names: %zu distinct names reached (FLIGHTREC_ENDPOINT_NAMES); further names "
          "are recorded as 'other' (counted as endpoint.names_capped)",
          side.names().size() - 1);
    }
    side.OnExchange(ctx.writer, e, ring_tid, &info);
    return;
  }
  // No name: the default threshold (for an exchange's continuation, the
  // connection keeps its first part's).
  e.slow_ns = side.names().SlowNs(0);
  side.OnExchange(ctx.writer, e, ring_tid);
}

// After a thread's ring is drained: what its dropped data calls added to
// their connections (socket_gaps.h), queued behind the records drained.
void HarvestGaps(FlushContext& ctx) {
  if (!g_flush || !ctx.thread) return;
  const uint32_t tid = TidOf(ctx);
  const uint64_t unsummarized = HarvestSocketGaps(
      SocketGapsOf(ctx.thread),
      [&](uint64_t conn, uint64_t in, uint64_t out, uint64_t ops, uint64_t errors, uint64_t last) {
        const uint64_t t = (last & kGapTimeIsTsc) ? tscclock::TicksToNs(last & ~kGapTimeIsTsc, ctx.now_ns) : last;
        if (SocketFlushSide* side = SideOrMake()) side->OnGap(SocketGapRecord{t, conn, in, out, ops, errors}, tid);
      });
  if (unsummarized) EmitGlobalDrops(ctx, "socket.gap", unsummarized);
}

void DecodeAddr(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  SocketAddrRecord r;
  if (h.size < sizeof(RecordHeader) || !ReadAddrRecord(payload, h.size - sizeof(RecordHeader), &r)) return;
  if (!SideOrMake()) return;
  g_flush->side->OnAddr(r, TidOf(ctx));
}

void OnSeal(const std::string&) { g_new_segment.store(true, std::memory_order_release); }

// A hint that the process is exiting, for the ticks between exit() and the
// final one (the final tick itself knows, ctx.final_tick). Registered by the
// first tick that has a socket side, so a process that ends before that
// tick never registers it: the final tick must not depend on it.
void MarkFinalizing() { g_finalize_ns.store(MonotonicNs(), std::memory_order_release); }

// Every kEvictEveryNs (not at the first tick): socket table entries of
// descriptors closed outside libc's close() are cleared. True when it ran.
bool HealStaleEntriesEvery(const FlushContext& ctx, FlushGlobals& g) {
  if (ctx.now_ns < g.next_evict_ns) return false;
  const bool due = g.next_evict_ns != 0;
  g.next_evict_ns = ctx.now_ns + kEvictEveryNs;
  if (!due) return false;
  const size_t healed = HealStaleSocketEntries();
  if (healed)
    LogOnce(&g.stale_logged, LogLevel::kInfo,
            "socket table: %zu stale entries repaired (sockets closed outside libc's close())", healed);
  return true;
}

void SampleAcceptQueues(FlushContext& ctx, FlushGlobals& g) {
  bool any = false;
  g.side->conns().ForEachListener([&](const ListenerInfo& l) { any = any || l.inode != 0; });
  if (!any) return;
  g.queues.clear();
  std::string error;
  if (!g.acceptq->Dump(&g.queues, &error)) {
    LogOnce(&g.acceptq_failed_logged, LogLevel::kWarn, "accept queue sampling unavailable (%s); will retry",
            error.c_str());
    return;
  }
  g.side->conns().ForEachListener([&](const ListenerInfo& l) {
    if (!l.inode) return;
    for (const ListenQueue& q : g.queues) {
      if (q.inode != l.inode) continue;
      Value v[] = {Value::U(ctx.now_ns), Value::U(l.conn),   Value::U(static_cast<uint64_t>(l.fd)),
                   Value::Str(l.local),  Value::U(q.queued), Value::U(q.backlog)};
      ctx.writer->Append(g_socket_types.acceptq, v, 6);
      break;
    }
  });
}

void FlushSource(FlushContext& ctx) {
  FlushGlobals* g = g_flush;
  if (!g) return;
  // The TSC's calibration runs from the first tick, socket or not: the
  // hooks read clock_gettime until it has a slope.
  tscclock::Refresh(ctx.now_ns);
  if (!g->side) {
    // No socket described yet. The socket table may still hold entries
    // (sockets made and not yet used): repair stale ones as below.
    HealStaleEntriesEvery(ctx, *g);
    return;
  }
  if (!g->atexit_registered) {
    g->atexit_registered = true;
    atexit(MarkFinalizing);
  }
  if (g_adopted_pending.exchange(false, std::memory_order_acq_rel)) g->side->conns().AnnounceAdopted(ctx.writer);
  if (g_new_segment.exchange(false, std::memory_order_acq_rel)) g->side->conns().NewSegment(ctx.writer);
  // Final in the final tick (exit, _exit, exec, a crash: every ring drained
  // to its end), and in a tick that began after exit() started: its drain
  // then holds everything the exited threads pushed. (A tick that was
  // already draining when exit() began may have missed records of another
  // ring.) Not the atexit hint alone: a process that exits before its first
  // tick with a socket never registered it, and an exchange still open in
  // its slot (a client that exits without closing) was lost, bytes and all.
  const uint64_t exiting_since = g_finalize_ns.load(std::memory_order_acquire);
  const bool final = ctx.final_tick || (exiting_since != 0 && ctx.now_ns > exiting_since);
  if (final) SweepExchangeSlots(ctx);
  // Up to when every ring was last drained, not this tick's start: a thread
  // the tick passed over as quiet (slot_scan.h) may still hold an earlier
  // call on a connection another thread has since closed.
  g->side->Process(ctx.writer, ctx.AllDrainedNs() - kSocketTimeGrainNs, final);

  if (g->acceptq_ns && ctx.now_ns >= g->next_acceptq_ns) {
    g->next_acceptq_ns = ctx.now_ns + g->acceptq_ns;
    SampleAcceptQueues(ctx, *g);
  }
  DropLedger& ledger = TheDropLedger();
  ledger.ReportGrowth(ctx, "endpoint.names_capped", g->side->names().capped(), &g->names_capped_reported);
  ledger.ReportGrowth(ctx, "socket.fd_beyond_table", sockfd::BeyondTableCount(), &g->beyond_reported);
  if (HealStaleEntriesEvery(ctx, *g) && ctx.now_ns > kEvictIdleNs)
    g->side->conns().EvictStale(ctx.now_ns - kEvictIdleNs);
}

}  // namespace

size_t HealStaleSocketEntries() {
  size_t healed = 0;
  // A failed look means "closed" only where the program's table can be read.
  if (!ProgramTableReachable()) return 0;
  const int hw = sockfd::HighWater();
  for (int fd = 0; fd < hw; ++fd) {
    const uint64_t e = sockfd::Lookup(fd);
    if (!e) continue;
    const ProgramFd sock(fd);
    struct stat st;
    const bool socket = sock.fd() >= 0 && fstat(sock.fd(), &st) == 0 && S_ISSOCK(st.st_mode);
    if (!socket && sockfd::ClearIf(fd, e)) healed++;
  }
  return healed;
}

ConnProbe LiveConnProbe() {
  ConnProbe p;
  p.adopt = LiveAdopt;
  p.inode = LiveInode;
  p.alive = Names;
  return p;
}

void RegisterSocketFlushSide(const Config& cfg) {
  DefineSocketEventTypes();
  MakeGlobals(cfg.acceptq_ms);
  RegisterRecordKind(kRecSocketOp, "socket.op", DecodeOp);
  RegisterThreadDrainedHook(HarvestGaps);
  RegisterRecordKind(kRecSocketAddr, "socket.addr", DecodeAddr);
  RegisterRecordKind(kRecSocketExchange, "socket.exchange", DecodeExchange);
  RegisterFlushSource(FlushSource);
  RegisterSealHook(OnSeal);
}

void AdoptLiveSockets() {
  if (!g_flush) return;
  const uint64_t now = MonotonicNs();
  const int hw = sockfd::HighWater();
  for (int fd = 0; fd < hw; ++fd) {
    const uint64_t e = sockfd::Lookup(fd);
    if (!e) continue;
    SocketFlushSide* side = SideOrMake();
    if (!side) return;
    side->conns().AdoptLive(sockfd::EntryConn(e), fd, now);
  }
  g_adopted_pending.store(true, std::memory_order_release);
}

void ResetSocketFlushSideAfterFork() {
  if (!g_flush) return;
  const uint64_t acceptq_ms = g_flush->acceptq_ns / kMs;
  MakeGlobals(acceptq_ms);
  tscclock::ResetAfterFork();
  g_new_segment.store(false, std::memory_order_relaxed);
  g_finalize_ns.store(0, std::memory_order_relaxed);
  // The inherited sockets, described before the child can close them.
  AdoptLiveSockets();
}

}  // namespace flightrec
