// Socket exchanges, the out-of-line side (see socket_exchange.h): mapping
// the slots, writing a slot's record, close and shutdown.
#include "preload/sockets/socket_exchange.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "preload/sockets/socket_gaps.h"
#include "preload/runtime/hot_data.h"
#include "preload/threads/record_kinds.h"
#include "preload/threads/thread_registry.h"

// In the hooks' hot line (hot_data.h), after the TSC word (tsc_clock.cc):
// the TLS offset is socket_hot_path.h's.
namespace flightrec::sockhot {
FR_HOT_DATA intptr_t g_tls_state_offset = 0;
}  // namespace flightrec::sockhot

namespace flightrec::sockex {

FR_HOT_DATA Slot* g_slots = nullptr;

namespace {
size_t g_slot_count = 0;

void Reset(Slot& s, uint64_t word) {
  s.word = word;
  s.tid = 0;
  s.ask_begin = s.ask_end = s.ans_begin = s.ans_end = 0;
  s.bytes_in = s.bytes_out = 0;
  s.calls_in = s.calls_out = s.errors = s.would_block = 0;
}

// Claims fd's slot for a close or shutdown: a data call holds it for tens of
// ns, so a bounded wait (a few us) almost always gets it; a holder that was
// preempted, or a signal handler interrupting the holder, is given up on.
bool ClaimForClose(Slot& s, uint32_t* q) {
  for (int i = 0; i < 2000; ++i) {
    uint32_t v = s.seq.load(std::memory_order_relaxed);
    if (!(v & 1) && s.seq.compare_exchange_strong(v, v + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      *q = v;
      return true;
    }
    __builtin_ia32_pause();
  }
  return false;
}
}  // namespace

void ForgetParentExchangesInChild() {
  if (!g_slots) return;
  const size_t hw = static_cast<size_t>(std::max(0, sockfd::HighWater()));
  const size_t n = hw < g_slot_count ? hw : g_slot_count;
  constexpr uint64_t kKeep = sockfd::kConnMask | kSTsc;  // the connection and its clock's unit
  for (size_t fd = 0; fd < n; ++fd) {
    Slot& s = g_slots[fd];
    const uint32_t q = s.seq.load(std::memory_order_relaxed);
    const bool held = q & 1;  // by a parent thread, which does not exist here
    const bool holds = (s.word & ~kKeep) != 0 || s.calls_in || s.calls_out || s.errors || s.would_block;
    if (!held && !holds) continue;  // read only: its page stays shared with the parent
    Reset(s, s.word & kKeep);
    if (held) s.seq.store(q + 1, std::memory_order_relaxed);
  }
}

bool Init(size_t fds, uint64_t open_bound_ns) {
  if (g_slots) return true;
  if (!fds) return false;
  void* mem =
      mmap(nullptr, fds * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  tscclock::SetOpenBoundNs(open_bound_ns);
  g_slot_count = fds;
  __atomic_store_n(&g_slots, static_cast<Slot*>(mem), __ATOMIC_RELEASE);  // zero pages: every slot empty
  return true;
}

namespace {
// The slot's record (its connection and calls known to be non-zero).
void Fill(const Slot& s, int fd, uint64_t now, uint16_t flags, ExchangeEnd end, SocketExchangeRecord* r) {
  if (s.word & kSCont) flags |= kExCont;
  if (s.word & kSEof) flags |= kExEof;
  if (s.word & kSErrIn) flags |= kExErrIn;
  if (s.word & kSErrOut) flags |= kExErrOut;
  if (end == ExchangeEnd::kPart) flags |= kExPartial;
  if (s.word & kSTsc) flags |= kExTsc;
  uint64_t at = s.ask_end > s.ans_end ? s.ask_end : s.ans_end;
  if (!at) at = now;
  r->conn = s.word & sockfd::kConnMask;
  r->ask_begin = s.ask_begin;
  r->ask_end = s.ask_end;
  r->ans_begin = s.ans_begin;
  r->ans_end = s.ans_end;
  r->at = at;
  r->bytes_in = s.bytes_in;
  r->bytes_out = s.bytes_out;
  r->calls_in = s.calls_in;
  r->calls_out = s.calls_out;
  r->errors = s.errors;
  r->would_block = s.would_block;
  r->fd = fd;
  r->tid = s.tid;
  r->flags = flags;
  r->prefix_len = 0;
  for (uint8_t& b : r->pad) b = 0;
}

// The bytes of fd's prefix buffer that belong to the slot's exchange (0 if none).
size_t PrefixLen(const Slot& s, int fd) {
  if (!(s.word & kSPfx) || !sockpfx::On()) return 0;
  const size_t len = sockpfx::Of(fd).len;
  return len < sockpfx::Cap() ? len : sockpfx::Cap();
}

void AttachPrefix(int fd, size_t len, SocketExchangeRecord* r) {
  if (!len) return;
  r->prefix_len = static_cast<uint16_t>(len);
  memcpy(reinterpret_cast<uint8_t*>(r) + sizeof(SocketExchangeRecord), sockpfx::Of(fd).bytes, len);
}
}  // namespace

__attribute__((noinline, cold)) void Emit(Slot& s, int fd, uint64_t now, uint16_t flags, ExchangeEnd end) {
  const uint64_t conn = s.word & sockfd::kConnMask;
  const uint32_t calls = uint32_t(s.calls_in) + s.calls_out;
  const uint64_t keep = end == ExchangeEnd::kPart ? (s.word & (kSAsk | kSAns)) | kSCont : 0;
  if (conn && calls) {
    ThreadState* ts = sockhot::ThreadStateViaHotLine();
    const size_t pfx = PrefixLen(s, fd);
    RecordWriter w(ts, kRecSocketExchange, static_cast<uint32_t>(sizeof(SocketExchangeRecord) + pfx));
    if (w.ok()) {
      auto* r = static_cast<SocketExchangeRecord*>(w.data());
      Fill(s, fd, now, flags, end, r);
      AttachPrefix(fd, pfx, r);
    } else if (ts) {
      // Dropped: the calls' bytes still reach the connection's totals.
      uint64_t at = s.ask_end > s.ans_end ? s.ask_end : s.ans_end;
      if (!at) at = now;
      SummarizeDroppedCalls(SocketGapsOf(ts), conn, s.bytes_in, s.bytes_out, calls, s.errors,
                            (s.word & kSTsc) ? at | kGapTimeIsTsc : at);
    }
  }
  Reset(s, (s.word & (sockfd::kConnMask | kSTsc)) | keep);
}

bool TakeForFlush(int fd, SocketExchangeRecord* out, uint8_t* prefix, size_t prefix_cap) {
  if (!g_slots || fd < 0 || static_cast<size_t>(fd) >= g_slot_count) return false;
  Slot& s = g_slots[fd];
  uint32_t q = s.seq.load(std::memory_order_relaxed);
  if ((q & 1) || !s.seq.compare_exchange_strong(q, q + 1, std::memory_order_acquire, std::memory_order_relaxed))
    return false;
  const bool any = (s.word & sockfd::kConnMask) && (s.calls_in || s.calls_out);
  if (any) {
    Fill(s, fd, 0, 0, ExchangeEnd::kPart, out);
    size_t pfx = PrefixLen(s, fd);
    if (pfx > prefix_cap) pfx = prefix_cap;
    if (pfx && prefix) {
      memcpy(prefix, sockpfx::Of(fd).bytes, pfx);
      out->prefix_len = static_cast<uint16_t>(pfx);
    }
    // A part: the exchange may still go on (the sweep runs where the process may live on).
    Reset(s, (s.word & (sockfd::kConnMask | kSTsc | kSAsk | kSAns)) | kSCont);
  }
  s.seq.store(q + 2, std::memory_order_release);
  return any;
}

__attribute__((noinline, cold)) void Rebind(Slot& s, int fd, uint64_t word, uint64_t now) {
  const bool same_conn = ((s.word ^ word) & sockfd::kConnMask) == 0;
  if (same_conn) {
    // The clock changed unit mid-exchange: what the slot holds goes out as a
    // part, the rest follows in the new unit.
    Emit(s, fd, 0, 0, ExchangeEnd::kPart);
    s.word = word | (s.word & (kSAsk | kSAns | kSCont));
    return;
  }
  Emit(s, fd, (s.word & kSTsc) == (word & kSTsc) ? now : 0, kExStale, ExchangeEnd::kComplete);
  Reset(s, word);
}

void Flush(int fd, uint64_t conn, uint64_t now_ns, FlushWhich which) {
  const bool only_answered = which == FlushWhich::kOnlyAnswered;
  if (!g_slots || fd < 0 || static_cast<size_t>(fd) >= g_slot_count) return;
  Slot& s = g_slots[fd];
  uint32_t q;
  if (!ClaimForClose(s, &q)) return;
  if ((s.word & sockfd::kConnMask) == conn && (!only_answered || (s.word & kSAns))) {
    Emit(s, fd, (s.word & kSTsc) ? 0 : now_ns, kExClosed, ExchangeEnd::kComplete);
    if (!only_answered) Reset(s, 0);
  }
  s.seq.store(q + 2, std::memory_order_release);
}

}  // namespace flightrec::sockex
