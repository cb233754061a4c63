// Socket lifecycle interposers: socket, socketpair, connect, bind, listen,
// accept, accept4, shutdown. They give each new socket a connection id in the
// fd table (socket_fd_table.h), record its role and addresses
// (SocketAddrRecord) and the call itself (SocketOpRecord).
//
// Only AF_INET, AF_INET6 and AF_UNIX sockets are tracked. Sockets flightrec's
// own threads make (libcurl's S3 connections and its wakeup pair) are never
// tracked: they go to flightrec's fd range, protected (fd_guard.h). Every hook returns
// exactly what the real call returned, with errno exactly as it left it.
// Address bytes are read only from buffers the kernel has just accepted or
// filled (never from an argument the call rejected), and accept() without an
// address buffer gets ours, so the peer address costs no extra system call.
#include <errno.h>
#include <sys/socket.h>

#include "preload/runtime/clock.h"
#include "preload/fds/fd_guard.h"
#include "preload/runtime/tsc_clock.h"
#include "preload/sockets/socket_direct.h"
#include "preload/sockets/socket_exchange.h"
#include "preload/sockets/socket_hot_path.h"
#include "preload/sockets/socket_real.h"
#include "preload/threads/block_notes.h"

#define FR_HOOK extern "C" __attribute__((visibility("default")))

using flightrec::AddrWhich;
using flightrec::g_real_sock;
using flightrec::MonotonicNs;
using flightrec::SockOp;
namespace tscclock = flightrec::tscclock;
namespace sockfd = flightrec::sockfd;
namespace sockhot = flightrec::sockhot;
namespace sockex = flightrec::sockex;

namespace {

inline int64_t Result(long rc, int saved_errno) { return rc < 0 ? -static_cast<int64_t>(saved_errno) : rc; }

// The local address of fd into ss (0 bytes if unknown). errno is restored by callers.
socklen_t LocalAddr(int fd, sockaddr_storage* ss) {
  socklen_t len = sizeof(*ss);
  return getsockname(fd, reinterpret_cast<sockaddr*>(ss), &len) == 0 ? len : 0;
}

// True when connect() certainly read the address argument: it succeeded, or
// failed for a reason the kernel finds only after copying the address in.
// (EFAULT, EINVAL, EBADF, ENOTSOCK: maybe not — then we never touch it.)
bool ConnectReadAddress(int rc, int err) {
  if (rc == 0) return true;
  switch (err) {
    case EINPROGRESS:
    case EALREADY:
    case EISCONN:
    case EAGAIN:
    case EINTR:
    case ECONNREFUSED:
    case ECONNRESET:
    case ETIMEDOUT:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EADDRNOTAVAIL:
    case EADDRINUSE:
    case EAFNOSUPPORT:
    case ENOENT:
    case EACCES:
    case EPERM:
    case EPROTOTYPE: return true;
    default: return false;
  }
}

// accept and accept4 share this; accept4_flags < 0 means plain accept.
// A lifecycle call that waited (a blocking accept for its next client, a
// connect for the handshake) is off-CPU time where the blocking-call hooks
// give it (the SIGPROF sampler), as a blocked recv is (hook_socket_io.cc).
// extra_skip: frames between the application's call and this one that are
// ours (AcceptImpl's own, under accept/accept4 that tail-call it).
inline void NoteIfBlocked(uint64_t t0, uint64_t t1, const char* reason, int extra_skip) {
  if (__builtin_expect(t1 - t0 >= tscclock::BlockMinNs(), 0) && flightrec::BlockNotesOn())
    flightrec::NoteBlock(t0, t1, reason, extra_skip);
}

// kEntryDirect for a socket created non-blocking, when direct calls are on
// (socket_direct.h). Stored with the entry, then confirmed (StoredDirect).
inline uint64_t DirectBit(bool nonblocking) {
  return nonblocking && flightrec::sockdirect::Allowed() ? sockfd::kEntryDirect : 0;
}

// Out of line so the accept hooks tail-call it: a blocked accept's stack then
// starts at the application's caller whichever hook it came through.
__attribute__((noinline)) int AcceptImpl(int fd, sockaddr* addr, socklen_t* addrlen, int accept4_flags) {
  auto call = [&](sockaddr* a, socklen_t* l) {
    return accept4_flags < 0 ? g_real_sock.accept(fd, a, l) : g_real_sock.accept4(fd, a, l, accept4_flags);
  };
  const uint64_t listener = sockfd::Lookup(fd);
  if (listener == 0 || !sockhot::Tracking()) return call(addr, addrlen);
  sockaddr_storage peer;
  socklen_t peer_len = sizeof(peer);
  const bool ours = addr == nullptr;  // no buffer from the app: the kernel fills ours
  const uint64_t t0 = MonotonicNs();
  const int nfd = ours ? call(reinterpret_cast<sockaddr*>(&peer), &peer_len) : call(addr, addrlen);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  NoteIfBlocked(t0, t1, accept4_flags < 0 ? "accept" : "accept4", 1);
  const uint64_t lconn = sockfd::EntryConn(listener);
  if (nfd >= 0) {
    const uint64_t conn = sockfd::NewConnId();
    const uint64_t entry =
        sockfd::MakeEntry(conn, sockfd::SockRole::kServer, sockfd::EntryFamily(listener), sockfd::EntryType(listener)) |
        DirectBit(accept4_flags > 0 && (accept4_flags & SOCK_NONBLOCK));
    sockfd::Set(nfd, entry);
    flightrec::sockdirect::StoredDirect(nfd, entry);
    if (sockhot::Recording()) {
      if (!ours) {
        peer_len = sizeof(peer);
        if (getpeername(nfd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) peer_len = 0;
      }
      sockhot::PushAddr(t1, conn, lconn, nfd, entry, AddrWhich::kPeer, &peer, peer_len, false);
      sockaddr_storage local;
      const socklen_t local_len = LocalAddr(nfd, &local);
      sockhot::PushAddr(t1, conn, lconn, nfd, entry, AddrWhich::kLocal, &local, local_len, true);
    }
  }
  if (sockhot::Recording()) sockhot::PushOp(SockOp::kAccept, fd, lconn, t0, t1, Result(nfd, saved));
  errno = saved;
  return nfd;
}

}  // namespace

FR_HOOK int socket(int domain, int type, int protocol) {
  if (__builtin_expect(flightrec::IsRecorderThread(), 0)) {
    flightrec::OwnFdChange opening;
    return flightrec::TakeOwnFd(g_real_sock.socket(domain, type, protocol));
  }
  if (!sockhot::Tracking()) return g_real_sock.socket(domain, type, protocol);
  const sockfd::SockFamily family = sockhot::FamilyOf(domain);
  if (family == sockfd::SockFamily::kOther) return g_real_sock.socket(domain, type, protocol);
  const uint64_t t0 = MonotonicNs();
  const int fd = g_real_sock.socket(domain, type, protocol);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  const sockfd::SockType st = sockhot::TypeOf(type);
  uint64_t conn = 0;
  if (fd >= 0) {
    conn = sockfd::NewConnId();
    const uint64_t entry =
        sockfd::MakeEntry(conn, sockfd::SockRole::kOther, family, st) | DirectBit(type & SOCK_NONBLOCK);
    if (sockfd::Set(fd, entry)) {
      flightrec::sockdirect::StoredDirect(fd, entry);
    } else {
      conn = 0;
    }
  }
  if (sockhot::Recording() && (conn || fd < 0))
    sockhot::PushOp(SockOp::kSocket, fd, conn, t0, t1, Result(fd, saved), 0,
                    static_cast<uint16_t>((uint16_t(family) << 8) | uint16_t(st)));
  errno = saved;
  return fd;
}

FR_HOOK int socketpair(int domain, int type, int protocol, int sv[2]) {
  if (__builtin_expect(flightrec::IsRecorderThread(), 0)) {
    flightrec::OwnFdChange opening;
    const int rc = g_real_sock.socketpair(domain, type, protocol, sv);
    if (rc == 0) flightrec::TakeOwnFds(sv);
    return rc;
  }
  if (!sockhot::Tracking()) return g_real_sock.socketpair(domain, type, protocol, sv);
  const sockfd::SockFamily family = sockhot::FamilyOf(domain);
  if (family == sockfd::SockFamily::kOther) return g_real_sock.socketpair(domain, type, protocol, sv);
  const uint64_t t0 = MonotonicNs();
  const int rc = g_real_sock.socketpair(domain, type, protocol, sv);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  uint64_t conn0 = 0;
  if (rc == 0) {
    for (int i = 0; i < 2; ++i) {
      const uint64_t conn = sockfd::NewConnId();
      const uint64_t entry = sockfd::MakeEntry(conn, sockfd::SockRole::kOther, family, sockhot::TypeOf(type)) |
                             DirectBit(type & SOCK_NONBLOCK);
      if (!sockfd::Set(sv[i], entry)) continue;
      flightrec::sockdirect::StoredDirect(sv[i], entry);
      if (i == 0) conn0 = conn;
      if (sockhot::Recording()) sockhot::PushAddr(t1, conn, 0, sv[i], entry, AddrWhich::kNone, nullptr, 0, true);
    }
  }
  if (sockhot::Recording())
    sockhot::PushOp(SockOp::kSocketpair, rc == 0 ? sv[0] : -1, conn0, t0, t1, Result(rc, saved));
  errno = saved;
  return rc;
}

FR_HOOK int connect(int fd, const sockaddr* addr, socklen_t len) {
  const uint64_t e = sockfd::Lookup(fd);
  if (e == 0 || !sockhot::Tracking()) return g_real_sock.connect(fd, addr, len);
  const uint64_t t0 = MonotonicNs();
  const int rc = g_real_sock.connect(fd, addr, len);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  NoteIfBlocked(t0, t1, "connect", 0);
  const uint64_t conn = sockfd::EntryConn(e);
  const bool readable =
      addr && len <= sizeof(sockaddr_storage) && len >= sizeof(sa_family_t) && ConnectReadAddress(rc, saved);
  // AF_UNSPEC "disconnects" a datagram socket; anything else makes it a client.
  const bool unspec = readable && addr->sa_family == AF_UNSPEC;
  uint64_t entry = e;
  if (!unspec) {
    const uint64_t updated = sockfd::SetRole(fd, conn, sockfd::SockRole::kClient);
    entry = updated ? updated : sockfd::WithRole(e, sockfd::SockRole::kClient);
  }
  if (sockhot::Recording()) {
    if (readable && !unspec) sockhot::PushAddr(t1, conn, 0, fd, entry, AddrWhich::kPeer, addr, len, false);
    sockaddr_storage local;
    socklen_t local_len = 0;
    if (rc == 0 || saved == EINPROGRESS) local_len = LocalAddr(fd, &local);
    sockhot::PushAddr(t1, conn, 0, fd, entry, AddrWhich::kLocal, &local, local_len, true);
    sockhot::PushOp(SockOp::kConnect, fd, conn, t0, t1, Result(rc, saved));
  }
  errno = saved;
  return rc;
}

FR_HOOK int bind(int fd, const sockaddr* addr, socklen_t len) {
  const uint64_t e = sockfd::Lookup(fd);
  if (e == 0 || !sockhot::Recording()) return g_real_sock.bind(fd, addr, len);
  const uint64_t t0 = MonotonicNs();
  const int rc = g_real_sock.bind(fd, addr, len);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  const uint64_t conn = sockfd::EntryConn(e);
  if (rc == 0) {
    // Port 0 and wildcard binds: the kernel's choice is what getsockname says.
    sockaddr_storage local;
    const socklen_t local_len = LocalAddr(fd, &local);
    sockhot::PushAddr(t1, conn, 0, fd, e, AddrWhich::kLocal, &local, local_len, false);
  }
  sockhot::PushOp(SockOp::kBind, fd, conn, t0, t1, Result(rc, saved));
  errno = saved;
  return rc;
}

FR_HOOK int listen(int fd, int backlog) {
  const uint64_t e = sockfd::Lookup(fd);
  if (e == 0 || !sockhot::Tracking()) return g_real_sock.listen(fd, backlog);
  const uint64_t t0 = MonotonicNs();
  const int rc = g_real_sock.listen(fd, backlog);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  const uint64_t conn = sockfd::EntryConn(e);
  uint64_t entry = e;
  if (rc == 0) {
    const uint64_t updated = sockfd::SetRole(fd, conn, sockfd::SockRole::kListener);
    entry = updated ? updated : sockfd::WithRole(e, sockfd::SockRole::kListener);
  }
  if (sockhot::Recording()) {
    if (rc == 0) {
      sockaddr_storage local;
      const socklen_t local_len = LocalAddr(fd, &local);
      sockhot::PushAddr(t1, conn, 0, fd, entry, AddrWhich::kLocal, &local, local_len, true);
    }
    const uint16_t b = backlog < 0 ? 0 : backlog > 0xffff ? 0xffff : static_cast<uint16_t>(backlog);
    sockhot::PushOp(SockOp::kListen, fd, conn, t0, t1, Result(rc, saved), 0, b);
  }
  errno = saved;
  return rc;
}

FR_HOOK int accept(int fd, sockaddr* addr, socklen_t* addrlen) { return AcceptImpl(fd, addr, addrlen, -1); }

FR_HOOK int accept4(int fd, sockaddr* addr, socklen_t* addrlen, int flags) {
  // Negative flags are invalid for accept4 anyway; keep them out of our sentinel.
  if (flags < 0) return g_real_sock.accept4(fd, addr, addrlen, flags);
  return AcceptImpl(fd, addr, addrlen, flags);
}

FR_HOOK int shutdown(int fd, int how) {
  const uint64_t e = sockfd::Lookup(fd);
  if (e == 0 || !sockhot::Recording()) return g_real_sock.shutdown(fd, how);
  const uint64_t t0 = MonotonicNs();
  const int rc = g_real_sock.shutdown(fd, how);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  // A server that shuts down has answered: its exchange is complete.
  if (rc == 0 && sockex::On() && sockfd::EntryRole(e) == sockfd::SockRole::kServer)
    sockex::Flush(fd, sockfd::EntryConn(e), t0, sockex::FlushWhich::kOnlyAnswered);
  sockhot::PushOp(SockOp::kShutdown, fd, sockfd::EntryConn(e), t0, t1, Result(rc, saved), 0,
                  static_cast<uint16_t>(how & 0xffff));
  errno = saved;
  return rc;
}
