// Socket fd table: which fds are sockets we track, and which connection each
// one stands for right now. A flat array of one atomic word per fd, mmap'd
// once at init (MAP_NORESERVE: untouched pages cost nothing), sized from
// RLIMIT_NOFILE's hard limit (capped at kMaxTableFds). Sockets on fds beyond
// the table are not tracked; they are counted (BeyondTableCount) and reported
// as recorder.dropped kind "socket.fd_beyond_table".
//
// Entry layout (0 = not a tracked socket):
//   bits  0..47  connection id (never 0 for a tracked socket)
//   bits 48..51  role    (SockRole)
//   bits 52..55  family  (SockFamily)
//   bits 56..59  type    (SockType)
//   bit  60      direct: data calls on this fd may skip libc's wrapper (the
//                socket is non-blocking, reached through this fd only, and
//                direct calls are on: socket_direct.h)
//   bit  61      shared: the file is reachable through another fd too (dup'd);
//                a flag change through that fd would go unseen, so bit 60 is
//                never set again
//
// Invariants:
//  * Hooks on any thread read and write entries with single atomic
//    operations: no locks, no allocation, async-signal-safe.
//  * An entry is set after the call that created the fd returned, and cleared
//    *before* the call that releases the number (close): once the kernel may
//    hand the number to another thread's socket(), we no longer touch it, so
//    a late clear can never wipe the newer socket's entry.
//  * Connection ids come from one process-wide counter (NewConnId): each
//    socket(), accept() and socketpair() end gets a fresh id, so an id never
//    names two sockets even when fd numbers are reused. dup'd fds share the id
//    of the socket they refer to.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace flightrec::sockfd {

enum class SockRole : uint8_t { kOther = 0, kClient = 1, kServer = 2, kListener = 3 };
enum class SockFamily : uint8_t { kOther = 0, kInet = 1, kInet6 = 2, kUnix = 3 };
enum class SockType : uint8_t { kOther = 0, kStream = 1, kDgram = 2, kSeqpacket = 3 };

inline constexpr uint64_t kConnMask = (uint64_t{1} << 48) - 1;
inline constexpr size_t kMaxTableFds = size_t{1} << 20;  // Linux's default fs.nr_open

inline uint64_t MakeEntry(uint64_t conn, SockRole role, SockFamily family, SockType type) {
  return (conn & kConnMask) | (uint64_t(role) << 48) | (uint64_t(family) << 52) | (uint64_t(type) << 56);
}
inline uint64_t EntryConn(uint64_t e) { return e & kConnMask; }
inline SockRole EntryRole(uint64_t e) { return SockRole((e >> 48) & 0xf); }
inline SockFamily EntryFamily(uint64_t e) { return SockFamily((e >> 52) & 0xf); }
inline SockType EntryType(uint64_t e) { return SockType((e >> 56) & 0xf); }
inline constexpr uint64_t kEntryDirect = uint64_t{1} << 60;
inline constexpr uint64_t kEntryShared = uint64_t{1} << 61;
inline bool EntryDirect(uint64_t e) { return (e & kEntryDirect) != 0; }
inline uint64_t WithRole(uint64_t e, SockRole role) { return (e & ~(uint64_t{0xf} << 48)) | (uint64_t(role) << 48); }

// Read directly by the hooks' fast path (one load and a compare for non-sockets).
extern std::atomic<uint64_t>* g_table;
extern size_t g_table_size;  // 0 until Init succeeds

// Maps the table (once; later calls are no-ops returning true). max_fds of 0
// means "from RLIMIT_NOFILE". Not async-signal-safe; called at init.
bool Init(size_t max_fds = 0);
bool Ready();

// The entry of fd, 0 when fd is not a tracked socket (or out of range, or the
// table is not mapped). The hot-path test for read/write.
inline uint64_t Lookup(int fd) {
  if (static_cast<size_t>(fd) >= g_table_size) return 0;  // also rejects fd < 0
  return g_table[fd].load(std::memory_order_relaxed);
}

// Sets fd's entry; a fd beyond the table is counted instead. Returns false if
// not stored.
bool Set(int fd, uint64_t entry);
// Clears fd's entry and returns what it held (0 if none).
uint64_t Clear(int fd);
// Clears fd's entry only if it still holds `expected` (the flush thread's
// repair of stale entries: a newer socket on the number is never touched).
bool ClearIf(int fd, uint64_t expected);
// Changes the role of fd's entry if it still names `conn`. Returns the new entry or 0.
uint64_t SetRole(int fd, uint64_t conn, SockRole role);

// Sets or clears bits in fd's entry if it still names `conn` (the flag
// hooks after a successful call). A shared entry never takes kEntryDirect.
// Returns the new entry or 0.
uint64_t UpdateFlags(int fd, uint64_t conn, uint64_t set, uint64_t clear);

// Highest fd ever stored + 1 (bounds close_range scans).
int HighWater();
// Sockets we could not track because their fd was beyond the table.
uint64_t BeyondTableCount();

// A fresh connection id (never 0, never reused within the process tree's
// address space; a forked child continues from the parent's counter, so ids
// are unique per process, not across processes).
uint64_t NewConnId();

}  // namespace flightrec::sockfd
