// Socket data interposers: send, sendto, sendmsg, sendmmsg, recv, recvfrom,
// recvmsg, recvmmsg, sendfile, and read, write, readv, writev (plus the
// _FORTIFY_SOURCE entry points __read_chk, __recv_chk, __recvfrom_chk) when
// the fd is a tracked socket.
//
// The fast path for everything else — read()/write() on files and pipes, or
// any call while FLIGHTREC_SOCKETS=0 — is one fd-table load and a compare.
// A recorded call adds two clock reads (raw TSC where invariant:
// socket_clock.h) and one ring push (SocketOpRecord); errno is exactly what
// the real call left. MSG_PEEK receives are recorded
// with kOpFlagPeek so their bytes are not counted as consumed.
#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "preload/socket_clock.h"
#include "preload/socket_hot_path.h"
#include "preload/socket_real.h"

#define FR_HOOK extern "C" __attribute__((visibility("default")))

using flightrec::g_real_sock;
using flightrec::kOpFlagPeek;
using flightrec::kOpFlagTsc;
using flightrec::SockOp;
namespace sockclock = flightrec::sockclock;
namespace sockfd = flightrec::sockfd;
namespace sockhot = flightrec::sockhot;

namespace {

// Records one call around `call` (which returns the real call's result).
// `bytes_of(rc)` turns a successful result into bytes moved.
// errno is read only when the call failed; the push never changes it.
template <typename Call, typename Bytes>
inline auto Timed(SockOp op, int fd, uint64_t entry, uint8_t flags, Call&& call, Bytes&& bytes_of) {
  const bool tsc = sockclock::UseTsc();
  const uint64_t t0 = sockclock::Read(tsc);
  const auto rc = call();
  const uint64_t t1 = sockclock::Read(tsc);
  sockhot::PushOp(op, fd, sockfd::EntryConn(entry), t0, t1,
                  rc < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(bytes_of(rc)),
                  tsc ? static_cast<uint8_t>(flags | kOpFlagTsc) : flags);
  return rc;
}

template <typename Call>
inline auto Timed(SockOp op, int fd, uint64_t entry, uint8_t flags, Call&& call) {
  return Timed(op, fd, entry, flags, call, [](auto rc) { return rc; });
}

// Fast-path test: the entry of fd if this call is to be recorded, else 0.
inline uint64_t Recorded(int fd) { return sockhot::RecordedEntry(fd); }

inline uint8_t PeekFlag(int flags) { return (flags & MSG_PEEK) ? kOpFlagPeek : 0; }

// Total bytes of the first n messages of an mmsg vector (the kernel filled msg_len).
inline int64_t MmsgBytes(const mmsghdr* v, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += v[i].msg_len;
  return total;
}

}  // namespace

FR_HOOK ssize_t send(int fd, const void* buf, size_t n, int flags) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.send(fd, buf, n, flags);
  return Timed(SockOp::kSend, fd, e, 0, [&] { return g_real_sock.send(fd, buf, n, flags); });
}

FR_HOOK ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* addr, socklen_t len) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.sendto(fd, buf, n, flags, addr, len);
  return Timed(SockOp::kSendto, fd, e, 0, [&] { return g_real_sock.sendto(fd, buf, n, flags, addr, len); });
}

FR_HOOK ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.sendmsg(fd, msg, flags);
  return Timed(SockOp::kSendmsg, fd, e, 0, [&] { return g_real_sock.sendmsg(fd, msg, flags); });
}

FR_HOOK int sendmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.sendmmsg(fd, vec, vlen, flags);
  return Timed(SockOp::kSendmmsg, fd, e, 0, [&] { return g_real_sock.sendmmsg(fd, vec, vlen, flags); },
               [&](int rc) { return MmsgBytes(vec, rc); });
}

FR_HOOK ssize_t recv(int fd, void* buf, size_t n, int flags) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.recv(fd, buf, n, flags);
  return Timed(SockOp::kRecv, fd, e, PeekFlag(flags), [&] { return g_real_sock.recv(fd, buf, n, flags); });
}

FR_HOOK ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* addr, socklen_t* len) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.recvfrom(fd, buf, n, flags, addr, len);
  return Timed(SockOp::kRecvfrom, fd, e, PeekFlag(flags),
               [&] { return g_real_sock.recvfrom(fd, buf, n, flags, addr, len); });
}

FR_HOOK ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.recvmsg(fd, msg, flags);
  return Timed(SockOp::kRecvmsg, fd, e, PeekFlag(flags), [&] { return g_real_sock.recvmsg(fd, msg, flags); });
}

FR_HOOK int recvmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags, struct timespec* timeout) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.recvmmsg(fd, vec, vlen, flags, timeout);
  return Timed(SockOp::kRecvmmsg, fd, e, PeekFlag(flags),
               [&] { return g_real_sock.recvmmsg(fd, vec, vlen, flags, timeout); },
               [&](int rc) { return MmsgBytes(vec, rc); });
}

FR_HOOK ssize_t read(int fd, void* buf, size_t n) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.read(fd, buf, n);
  return Timed(SockOp::kRead, fd, e, 0, [&] { return g_real_sock.read(fd, buf, n); });
}

FR_HOOK ssize_t write(int fd, const void* buf, size_t n) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.write(fd, buf, n);
  return Timed(SockOp::kWrite, fd, e, 0, [&] { return g_real_sock.write(fd, buf, n); });
}

FR_HOOK ssize_t readv(int fd, const iovec* iov, int n) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.readv(fd, iov, n);
  return Timed(SockOp::kReadv, fd, e, 0, [&] { return g_real_sock.readv(fd, iov, n); });
}

FR_HOOK ssize_t writev(int fd, const iovec* iov, int n) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.writev(fd, iov, n);
  return Timed(SockOp::kWritev, fd, e, 0, [&] { return g_real_sock.writev(fd, iov, n); });
}

FR_HOOK ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  const uint64_t e = Recorded(out_fd);
  if (!e) return g_real_sock.sendfile(out_fd, in_fd, offset, count);
  return Timed(SockOp::kSendfile, out_fd, e, 0, [&] { return g_real_sock.sendfile(out_fd, in_fd, offset, count); });
}

FR_HOOK ssize_t sendfile64(int out_fd, int in_fd, off_t* offset, size_t count) {
  const uint64_t e = Recorded(out_fd);
  if (!e) return g_real_sock.sendfile64(out_fd, in_fd, offset, count);
  return Timed(SockOp::kSendfile, out_fd, e, 0,
               [&] { return g_real_sock.sendfile64(out_fd, in_fd, offset, count); });
}

// _FORTIFY_SOURCE builds call these instead of read/recv/recvfrom when the
// buffer size is known at compile time; glibc's versions call the syscall
// directly, so without these hooks a fortified service would be invisible.
FR_HOOK ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.read_chk(fd, buf, n, buflen);
  return Timed(SockOp::kRead, fd, e, 0, [&] { return g_real_sock.read_chk(fd, buf, n, buflen); });
}

FR_HOOK ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.recv_chk(fd, buf, n, buflen, flags);
  return Timed(SockOp::kRecv, fd, e, PeekFlag(flags),
               [&] { return g_real_sock.recv_chk(fd, buf, n, buflen, flags); });
}

FR_HOOK ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, sockaddr* addr,
                               socklen_t* len) {
  const uint64_t e = Recorded(fd);
  if (!e) return g_real_sock.recvfrom_chk(fd, buf, n, buflen, flags, addr, len);
  return Timed(SockOp::kRecvfrom, fd, e, PeekFlag(flags),
               [&] { return g_real_sock.recvfrom_chk(fd, buf, n, buflen, flags, addr, len); });
}
