// Socket records: the records the socket hooks push into the calling
// thread's ring (kinds kRecSocketOp, fixed size, and kRecSocketAddr, cut
// after its address), and the operation codes with their names as they
// appear in socket.op events.
#pragma once
#include <cstddef>
#include <cerrno>
#include <cstdint>
#include <string_view>

namespace flightrec {

enum class SockOp : uint8_t {
  kNone = 0,
  // connection lifecycle
  kSocket,
  kSocketpair,
  kConnect,
  kBind,
  kListen,
  kAccept,
  kClose,
  kShutdown,
  kDup,
  // data out
  kSend,
  kSendto,
  kSendmsg,
  kSendmmsg,
  kWrite,
  kWritev,
  kSendfile,
  kSpliceOut,
  // data in
  kRecv,
  kRecvfrom,
  kRecvmsg,
  kRecvmmsg,
  kRead,
  kReadv,
  kSpliceIn,
  kCount,
};

// string_views: the flush thread interns one per event and should not
// measure it; .data() is NUL-terminated static storage for const char* users.
inline constexpr std::string_view kSockOpNames[] = {
    "none", "socket",   "socketpair", "connect",  "bind",     "listen", "accept",    "close",    "shutdown",
    "dup",  "send",     "sendto",     "sendmsg",  "sendmmsg", "write",  "writev",    "sendfile", "splice_out",
    "recv", "recvfrom", "recvmsg",    "recvmmsg", "read",     "readv",  "splice_in",
};
static_assert(sizeof(kSockOpNames) / sizeof(kSockOpNames[0]) == size_t(SockOp::kCount));

inline const char* SockOpName(uint8_t op) { return op < uint8_t(SockOp::kCount) ? kSockOpNames[op].data() : "unknown"; }
inline bool IsSendOp(uint8_t op) { return op >= uint8_t(SockOp::kSend) && op <= uint8_t(SockOp::kSpliceOut); }
inline bool IsRecvOp(uint8_t op) { return op >= uint8_t(SockOp::kRecv) && op <= uint8_t(SockOp::kSpliceIn); }
inline bool IsDataOp(uint8_t op) { return IsSendOp(op) || IsRecvOp(op); }
// A failed call that counts as an error of the connection: would-block and
// in-progress are outcomes of non-blocking I/O, EINTR is the caller's signal.
inline bool IsSocketError(int64_t result) {
  return result < 0 && result != -EAGAIN && result != -EINPROGRESS && result != -EINTR;
}

// Not a ring record: a socket_gaps.h harvest, queued with the op records.
struct SocketGapRecord {
  uint64_t time_ns;  // end of the last call summed
  uint64_t conn, bytes_in, bytes_out, ops, errors;
};

// SocketOpRecord.flags
inline constexpr uint8_t kOpFlagPeek = 1;  // MSG_PEEK: bytes were not consumed
inline constexpr uint8_t kOpFlagTsc = 2;   // start_ns/duration_ns hold TSC ticks (tsc_clock.h)

// One socket operation. 40 bytes + the 8-byte ring header.
//   start_ns, duration_ns: CLOCK_MONOTONIC ns, or TSC ticks with kOpFlagTsc
//   (the flush thread converts; tsc_clock.h).
//   result: bytes moved for data ops; for the others the call's result (0,
//   or the new fd for accept/dup); -errno on failure (EAGAIN included).
//   For accept, fd/conn are the listener's; the new connection is described
//   by the SocketAddrRecords pushed just before.
//   For dup, fd is the new fd and aux the old one.
//   For socket, aux = family << 8 | type (SockFamily, SockType).
struct SocketOpRecord {
  uint64_t start_ns;
  uint64_t duration_ns;
  int64_t result;
  uint64_t conn;
  int32_t fd;
  uint8_t op;     // SockOp
  uint8_t flags;  // kOpFlag*
  uint16_t aux;
};
static_assert(sizeof(SocketOpRecord) == 40);

// What a SocketAddrRecord's address is.
enum class AddrWhich : uint8_t { kNone = 0, kLocal = 1, kPeer = 2 };

// Identity of a connection and one of its addresses. Pushed by connect,
// accept, bind, listen and socketpair, before their op record. `complete`
// marks the last identity record of the call: the connection's role and
// addresses are then known and socket.open can be emitted.
// In the ring the record stops after addr_len bytes of addr (rounded up to
// 8 by the ring): 48-80 bytes for an inet address or none, not 168, so a
// burst of new connections fits about three times as many before the ring
// fills (ReadAddrRecord restores the full struct).
struct SocketAddrRecord {
  uint64_t time_ns;
  uint64_t conn;
  uint64_t parent_conn;  // accept: the listener's connection id
  int32_t fd;
  uint8_t role;       // sockfd::SockRole
  uint8_t family;     // sockfd::SockFamily
  uint8_t type;       // sockfd::SockType
  uint8_t which;      // AddrWhich
  uint16_t addr_len;  // bytes of addr used (0 = none)
  uint8_t complete;
  uint8_t pad[5];
  uint8_t addr[128];  // struct sockaddr_storage bytes
};
static_assert(sizeof(SocketAddrRecord) == 168);
inline constexpr size_t kAddrRecordFixedBytes = offsetof(SocketAddrRecord, addr);
static_assert(kAddrRecordFixedBytes == 40);

// The ring bytes of an address record (payload_bytes of them, which may
// include the ring's padding) as the full struct: the address past what
// was written reads as zeros, and an addr_len claiming more than the record
// holds is cut to what it holds. False when the record is too short to be one.
inline bool ReadAddrRecord(const void* payload, size_t payload_bytes, SocketAddrRecord* out) {
  if (payload_bytes < kAddrRecordFixedBytes) return false;
  *out = SocketAddrRecord{};
  const size_t n = payload_bytes < sizeof(*out) ? payload_bytes : sizeof(*out);
  __builtin_memcpy(out, payload, n);
  const size_t held = n - kAddrRecordFixedBytes;
  if (out->addr_len > held) out->addr_len = static_cast<uint16_t>(held);
  return true;
}

}  // namespace flightrec
