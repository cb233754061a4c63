// Socket hot path: what the socket and fd hooks share — the "is this call
// ours to record" tests and the one ring push per call. Everything here is
// lock-free, allocation-free and async-signal-safe.
//
// Cost of a recorded call: the table lookup, two clock reads and one ring
// push (PushOp); on a non-blocking socket the hook also makes the system call
// itself (socket_direct.h), which takes one mispredicted return after the
// kernel off what libc's wrapper would add. Connection setup calls (connect, accept, listen) also ask
// the kernel for the local/peer address with getsockname/getpeername once.
//
// Besides the two clock reads, what a data hook costs is mostly how many
// distinct cache lines it touches: the real call's trip through the kernel
// evicts them, and each costs ~3-5 ns to fetch again (measured on this VM: 8
// extra lines read after each pipe write+read pair cost ~30 ns per pair).
// Hence: the push is inline (no calls into other objects' code), the hook's
// globals share one line (FR_HOT_DATA), errno is only read when the
// call failed, and the "recorder still running" switch is not consulted on
// the data path (a thread with a ring pushes; after shutdown nobody drains
// it, as with any record made during exit).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "preload/runtime/runtime_state.h"
#include "preload/sockets/socket_fd_table.h"
#include "preload/sockets/socket_gaps.h"
#include "preload/sockets/socket_records.h"
#include "preload/threads/thread_registry.h"

namespace flightrec::sockhot {

// The socket table is mapped (FLIGHTREC_SOCKETS=1 and init ran) and the
// calling thread is not one of flightrec's own: keep the fd table right.
inline bool Tracking() { return sockfd::g_table_size != 0 && !(t_thread_flags & kThreadFlagRecorder); }
// ... and the recorder is running: also push records.
inline bool Recording() { return Tracking() && RuntimeRecording(); }

// The pid the fd table belongs to. A vfork child shares our memory but has
// its own fd table: its closes must not clear our entries.
void SetOwnerPid(pid_t pid);
bool InOwnerProcess();  // one getpid(); only on close/dup paths of tracked sockets

// The entry of fd if a data call on it is to be recorded, else 0. Our own
// threads are not asked about: they never register a ring (RecordWriter then
// records nothing), and the sockets they use (the uploader's) were created
// on them, so never entered the table.
inline uint64_t RecordedEntry(int fd) { return sockfd::Lookup(fd); }

// t_state's offset from the thread pointer: initial-exec TLS has one offset
// for every thread. Kept in the hot line (FR_HOT_DATA) and set at init
// before any socket is tracked, so a push reads the calling thread's state
// with one %fs-relative load instead of first loading the offset from the
// GOT: one cache line fewer per recorded call.
extern intptr_t g_tls_state_offset;
void InitTlsStateOffset();  // socket init, before the fd table is mapped

inline ThreadState* ThreadStateViaHotLine() {
  const intptr_t off = g_tls_state_offset;
  if (__builtin_expect(off == 0, 0)) return t_state;  // before init: the ordinary way
  ThreadState* ts;
  // "memory": the load must see this thread's latest store to t_state,
  // which the compiler cannot tell the asm reads.
  asm volatile("movq %%fs:(%1), %0" : "=r"(ts) : "r"(off) : "memory");
  return ts;
}

__attribute__((always_inline)) inline void PushOp(SockOp op, int fd, uint64_t conn, uint64_t start, uint64_t end,
                                                  int64_t result, uint8_t flags = 0, uint16_t aux = 0) {
  ThreadState* ts = ThreadStateViaHotLine();
  RecordWriter w(ts, kRecSocketOp, sizeof(SocketOpRecord));
  if (__builtin_expect(!w.ok(), 0)) {
    // Dropped: a data call's bytes still reach the connection's totals.
    if (ts && IsDataOp(static_cast<uint8_t>(op))) {
      const uint64_t moved = result > 0 && !(flags & kOpFlagPeek) ? static_cast<uint64_t>(result) : 0;
      const bool send = IsSendOp(static_cast<uint8_t>(op));
      SummarizeDroppedDataOp(SocketGapsOf(ts), conn, send ? 0 : moved, send ? moved : 0, IsSocketError(result),
                             (flags & kOpFlagTsc) ? end | kGapTimeIsTsc : end);
    }
    return;
  }
  auto* r = static_cast<SocketOpRecord*>(w.data());
  r->start_ns = start;
  r->duration_ns = end >= start ? end - start : 0;
  r->result = result;
  r->conn = conn;
  r->fd = fd;
  r->op = static_cast<uint8_t>(op);
  r->flags = flags;
  r->aux = aux;
}

// entry supplies role/family/type. addr may be null (len 0).
void PushAddr(uint64_t time_ns, uint64_t conn, uint64_t parent_conn, int fd, uint64_t entry, AddrWhich which,
              const void* addr, size_t len, bool complete);

// Table family/type codes for socket(domain, type) arguments; kOther family
// means "not a socket we track" (netlink, packet, ...).
sockfd::SockFamily FamilyOf(int domain);
sockfd::SockType TypeOf(int type);

}  // namespace flightrec::sockhot
