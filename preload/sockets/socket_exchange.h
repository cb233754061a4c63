// Socket exchanges: the hot path's per-descriptor accounting of data calls,
// written to the ring as one record per request/response exchange instead of
// one record per call (FLIGHTREC_SOCKETS=1, the default; FLIGHTREC_SOCKETS=calls
// keeps one SocketOpRecord per call).
//
// A connection alternates: a run of calls in the "ask" direction (a server
// receives the request, a client sends it), then a run in the "answer"
// direction. Each tracked descriptor has a slot (one cache line, in a flat
// array indexed like the fd table) holding the exchange in progress: bytes and
// calls per direction, the first and last times of each run, errors and
// would-blocks. The hook writes one SocketExchangeRecord
//   * when the connection turns from answering back to asking (the previous
//     exchange is complete),
//   * at close and shutdown (the exchange in progress),
//   * when a receive returns end of stream,
//   * when the record has been open longer than the open bound (1 s, or
//     FLIGHTREC_TRIGGER_SLOW_MS if smaller: a long download or a stuck
//     request shows up while it happens; flagged kExPartial, and the next
//     record of the descriptor kExCont), or a counter would overflow.
// Bytes and call counts are exact: every data call is counted once, either in
// a slot or, when its slot is busy, in a per-call SocketOpRecord.
//
// Concurrency: a slot is claimed with one compare-and-swap of its sequence
// word (even: free, odd: held) and released with a store. A thread that finds
// the slot held (another thread on the same descriptor at the same moment,
// or a signal handler that interrupted a hook) does not wait: it records its
// call as a per-call SocketOpRecord, and the reader counts those
// (`sockets`: "calls recorded one by one"). Totals stay exact and no record
// is ever torn. Close and shutdown wait a bounded few microseconds for a held
// slot, then give up (the exchange is written by the next call on the
// number, flagged kExStale, or not at all: docs/LIMITS.md).
//
// Hot-path rules: lock-free, no allocation, no I/O, async-signal-safe.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>

#include "preload/runtime/tsc_clock.h"
#include "preload/sockets/socket_fd_table.h"
#include "preload/sockets/socket_hot_path.h"
#include "preload/sockets/socket_prefix.h"
#include "preload/sockets/socket_records.h"

namespace flightrec {

// SocketExchangeRecord.flags and socket.exchange's flags field.
inline constexpr uint16_t kExAskIsSend = 1;  // the ask run is sends (a client connection)
inline constexpr uint16_t kExPartial = 2;    // the exchange goes on in the descriptor's next record
inline constexpr uint16_t kExCont = 4;       // continues the descriptor's previous (partial) record
inline constexpr uint16_t kExEof = 8;        // a receive returned end of stream
inline constexpr uint16_t kExClosed = 16;    // written at close or shutdown
inline constexpr uint16_t kExStale = 32;     // left in the slot by a connection whose close was not seen
inline constexpr uint16_t kExErrIn = 64;     // a receive failed (its errors count among `errors`)
inline constexpr uint16_t kExErrOut = 128;   // a send failed
inline constexpr uint16_t kExTsc = 0x100;    // record only: times are TSC ticks (tsc_clock.h)

// One exchange (or part of one: kExPartial/kExCont). 96 bytes + the 8-byte
// ring header. Times are CLOCK_MONOTONIC ns, or TSC ticks with kExTsc; a time
// of 0 means the run is absent.
//   ask_begin: a receive run begins at the end of its first data call (the
//     wait for the first bytes is idle time), a send run at the start of its
//     first; ask_end: end of its last data call.
//   ans_begin / ans_end: end of the answer run's first / last data call.
//   at: when the record was written (its time when neither run moved data).
//   calls_*: every call in each direction, data or not (failed, would-block,
//     zero-byte, MSG_PEEK); errors: failures other than would-block, EINTR,
//     EINPROGRESS (IsSocketError); would_block: EAGAIN results.
//   tid: the thread that began a server's answer, or a client's question
//     (where the work for the request most likely ran); 0 if none.
//   prefix_len: the first bytes of the question follow the record (the
//     record's ring size covers them; socket_prefix.h), 0 if none: only in
//     an exchange's first record, with FLIGHTREC_ENDPOINTS on.
struct SocketExchangeRecord {
  uint64_t conn;
  uint64_t ask_begin, ask_end, ans_begin, ans_end, at;
  uint64_t bytes_in, bytes_out;
  uint32_t calls_in, calls_out, errors, would_block;
  int32_t fd;
  uint32_t tid;
  uint16_t flags;
  uint16_t prefix_len;
  uint8_t pad[4];
};
static_assert(sizeof(SocketExchangeRecord) == 96);

namespace sockex {

// A descriptor's exchange in progress. One cache line.
struct alignas(64) Slot {
  std::atomic<uint32_t> seq{0};  // odd while a thread holds the slot
  uint32_t tid = 0;
  uint64_t word = 0;  // connection id (48 bits) | state bits (kS*)
  uint64_t ask_begin = 0, ask_end = 0, ans_begin = 0, ans_end = 0;
  uint32_t bytes_in = 0, bytes_out = 0;
  uint16_t calls_in = 0, calls_out = 0, errors = 0, would_block = 0;
};
static_assert(sizeof(Slot) == 64);

inline constexpr uint64_t kSAsk = uint64_t{1} << 48;      // the exchange has asked
inline constexpr uint64_t kSAns = uint64_t{1} << 49;      // ... and been answered
inline constexpr uint64_t kSCont = uint64_t{1} << 50;     // the next record continues a partial one
inline constexpr uint64_t kSTsc = uint64_t{1} << 51;      // times in TSC ticks
inline constexpr uint64_t kSEof = uint64_t{1} << 52;      // end of stream seen
inline constexpr uint64_t kSPfx = uint64_t{1} << 53;      // fd's prefix buffer holds this exchange's question
inline constexpr uint64_t kSPfxDone = uint64_t{1} << 54;  // ... and is full: no more copying this exchange
inline constexpr uint64_t kSErrIn = uint64_t{1} << 55;    // this record's calls include a failed receive
inline constexpr uint64_t kSErrOut = uint64_t{1} << 56;   // ... a failed send

// The slots (mapped at init when exchanges are on; null otherwise): also the
// switch the data hooks test. In the hot line (hot_data.h).
extern Slot* g_slots;

// Maps the slot array for `fds` descriptors (the fd table's size). Init only.
bool Init(size_t fds, uint64_t open_bound_ns);

// In a forked child, at once (the fork handler, on the only thread): the
// slots are copies of the parent's, and the exchanges in them are the
// parent's, which goes on accounting them (its close, its end write them).
// The child starts each connection's exchange afresh; before, its close,
// exit or exec wrote the parent's bytes a second time under its own pid.
// A slot a parent thread held at the fork is released (its holder does not
// exist here). Allocation-free; writes only the slots that held something
// (their pages are the parent's, copy-on-write).
void ForgetParentExchangesInChild();
inline bool On() { return g_slots != nullptr; }

// Out of line, rare: write the slot's record with `flags` and reset it
// (keeping the connection; keeping the state bits when partial).
enum class ExchangeEnd : bool {
  kComplete = false,  // the exchange is over: the slot starts afresh
  kPart = true,       // a part goes out (kExPartial); the next record continues it
};
void Emit(Slot& s, int fd, uint64_t now, uint16_t flags, ExchangeEnd end);
// The slot held another connection's exchange (a close we did not see):
// write it (kExStale) and take the slot for `word`.
void Rebind(Slot& s, int fd, uint64_t word, uint64_t now);

// The calling thread's tid: read once per run that needs it, not per call.
inline uint32_t CallerTid() {
  const ThreadState* ts = sockhot::ThreadStateViaHotLine();
  return ts ? static_cast<uint32_t>(ts->tid) : 0;
}

// One data call's share. Returns false when the slot is held: the caller
// records the call on its own (per-call record). `send`: the call's
// direction. `src`: where its bytes are, for the question's prefix
// (socket_prefix.h).
__attribute__((always_inline)) inline bool Account(uint64_t entry, int fd, bool send, bool peek, bool tsc, uint64_t t0,
                                                   uint64_t t1, int64_t result,
                                                   const sockpfx::Src& src = sockpfx::Src{}) {
  Slot& s = g_slots[fd];
  uint32_t q = s.seq.load(std::memory_order_relaxed);
  if (__builtin_expect((q & 1) != 0, 0) ||
      __builtin_expect(!s.seq.compare_exchange_strong(q, q + 1, std::memory_order_acquire, std::memory_order_relaxed),
                       0))
    return false;
  const uint64_t want = sockfd::EntryConn(entry) | (tsc ? kSTsc : 0);
  if (__builtin_expect((s.word & (sockfd::kConnMask | kSTsc)) != want, 0)) Rebind(s, fd, want, t1);
  const bool client = sockfd::EntryRole(entry) == sockfd::SockRole::kClient;
  const bool ask = send == client;
  uint32_t& bytes = send ? s.bytes_out : s.bytes_in;
  uint16_t& calls = send ? s.calls_out : s.calls_in;
  if (__builtin_expect(calls == 0xffff || s.errors == 0xffff || s.would_block == 0xffff, 0) ||
      (result > 0 && __builtin_expect(uint64_t(bytes) + uint64_t(result) > 0xffffffffull, 0)))
    Emit(s, fd, t1, 0, ExchangeEnd::kPart);  // a counter is full: what the slot holds goes out as a part
  if (result > 0 && !peek) {
    if (ask) {
      if (s.word & kSAns)
        Emit(s, fd, t1, 0, ExchangeEnd::kComplete);  // asking again: the previous exchange is complete
      s.word |= kSAsk;
      if (!s.ask_end) {
        s.ask_begin = send ? t0 : t1;
        if (client) s.tid = CallerTid();
      }
      s.ask_end = t1;
      // The question's first bytes (not a continuation's: those are the
      // middle of a long question), copied once, up to the cap.
      if (sockpfx::On() && !(s.word & (kSPfxDone | kSCont))) {
        const bool fresh = !(s.word & kSPfx);
        s.word |= kSPfx;
        if (sockpfx::Capture(fd, src, static_cast<size_t>(result), fresh)) s.word |= kSPfxDone;
      }
    } else {
      s.word |= kSAns;
      if (!s.ans_end) {
        s.ans_begin = t1;
        if (!client) s.tid = CallerTid();
      }
      s.ans_end = t1;
    }
    bytes += static_cast<uint32_t>(result);
    calls++;
    const uint64_t first = s.ask_end ? s.ask_begin : s.ans_begin;
    if (__builtin_expect(t1 - first >= tscclock::OpenBound(tsc), 0)) Emit(s, fd, t1, 0, ExchangeEnd::kPart);
  } else {
    calls++;
    if (result == -EAGAIN) s.would_block++;
    else if (IsSocketError(result)) {
      s.errors++;
      s.word |= send ? kSErrOut : kSErrIn;  // which way failed: a reset recv and a refused send read differently
    }
    // End of stream: the peer will ask nothing more.
    if (result == 0 && !send && sockfd::EntryType(entry) != sockfd::SockType::kDgram) {
      s.word |= kSEof;
      if (s.word & (kSAsk | kSAns)) Emit(s, fd, t1, 0, ExchangeEnd::kComplete);
    }
  }
  s.seq.store(q + 2, std::memory_order_release);
  return true;
}

// Close and shutdown of fd (connection conn), before their own record: the
// exchange in progress goes out (kExClosed). FlushWhich::kOnlyAnswered: only if the
// exchange has its answer (a server's shutdown ends its exchange, as the
// reader's inference always had it); otherwise the slot is left as it is.
enum class FlushWhich : bool { kAny = false, kOnlyAnswered = true };
void Flush(int fd, uint64_t conn, uint64_t now_ns, FlushWhich which);

// The flush thread's sweep at the process's end (socket_flush.cc): what fd's
// slot holds, as a record (kExPartial), if the slot is free and holds calls;
// the slot keeps the exchange's state. Returns whether *out was filled. The
// question's prefix, if the record carries one, goes to prefix (at most
// prefix_cap bytes; out->prefix_len says how many).
bool TakeForFlush(int fd, SocketExchangeRecord* out, uint8_t* prefix, size_t prefix_cap);

// A close of a tracked socket: its exchange, then the close record.
inline void PushClose(int fd, uint64_t conn, uint64_t t0, uint64_t t1, int64_t result) {
  if (On()) Flush(fd, conn, t0, FlushWhich::kAny);
  sockhot::PushOp(SockOp::kClose, fd, conn, t0, t1, result);
}

}  // namespace sockex
}  // namespace flightrec
