// Socket data interposers: send, sendto, sendmsg, sendmmsg, recv, recvfrom,
// recvmsg, recvmmsg, sendfile, splice (a pipe to or from a socket: proxies
// move bytes without copying them), and read, write, readv, writev (plus the
// _FORTIFY_SOURCE entry points __read_chk, __recv_chk, __recvfrom_chk) when
// the fd is a tracked socket.
//
// The fast path for everything else — read()/write() on files and pipes, or
// any call while FLIGHTREC_SOCKETS=0 — is one fd-table load and a compare.
// A recorded call adds two clock reads (raw TSC where invariant:
// tsc_clock.h) and its share of the descriptor's exchange
// (socket_exchange.h: one record per request/response exchange), or with
// FLIGHTREC_SOCKETS=calls one ring push (SocketOpRecord); errno is exactly what
// the real call left. On a non-blocking socket the system call itself is
// made here rather than through libc's wrapper (socket_direct.h). MSG_PEEK receives are recorded
// with kOpFlagPeek so their bytes are not counted as consumed.
#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <tuple>

#include "preload/fds/validation_pipe.h"
#include "preload/runtime/tsc_clock.h"
#include "preload/sockets/socket_direct.h"
#include "preload/sockets/socket_exchange.h"
#include "preload/sockets/socket_hot_path.h"
#include "preload/sockets/socket_prefix.h"
#include "preload/sockets/socket_real.h"
#include "preload/sockets/socket_records.h"
#include "preload/threads/block_notes.h"

#define FR_HOOK extern "C" __attribute__((visibility("default")))

using flightrec::g_real_sock;
using flightrec::kOpFlagPeek;
using flightrec::kOpFlagTsc;
using flightrec::SockOp;
namespace tscclock = flightrec::tscclock;
namespace sockdirect = flightrec::sockdirect;
namespace sockex = flightrec::sockex;
namespace sockfd = flightrec::sockfd;
namespace sockhot = flightrec::sockhot;

namespace {

using flightrec::RealSocketFns;

// Total bytes of the first n messages of an mmsg vector (the kernel filled msg_len).
inline int64_t MmsgBytes(const mmsghdr* v, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += v[i].msg_len;
  return total;
}

// After a recorded call: one push, and a call that blocked is offered as
// off-CPU time where the blocking-call hooks give it (the SIGPROF sampler):
// one compare here, the rest only when it did. errno is unchanged. `word` is
// the TSC word TimedCall read before the call (tsc_clock.h): it chose the
// clock, and in ticks it is the block threshold.
template <SockOp kOp>
__attribute__((always_inline)) inline void Note(uint64_t entry, uint8_t flags, int fd, uint64_t word, bool tsc,
                                                uint64_t t0, uint64_t t1, int64_t result,
                                                const flightrec::sockpfx::Src& src) {
  // The exchange accounting of fd's slot (socket_exchange.h); a call whose
  // slot another thread holds, or every call with FLIGHTREC_SOCKETS=calls,
  // is a record of its own.
  if (!sockex::On() || !sockex::Account(entry, fd, flightrec::IsSendOp(static_cast<uint8_t>(kOp)),
                                        (flags & kOpFlagPeek) != 0, tsc, t0, t1, result, src))
    sockhot::PushOp(kOp, fd, sockfd::EntryConn(entry), t0, t1, result,
                    tsc ? static_cast<uint8_t>(flags | kOpFlagTsc) : flags);
  if (__builtin_expect(t1 - t0 >= tscclock::BlockThreshold(word), 0) && flightrec::BlockNotesOn()) {
    const int saved_errno = errno;
    const uint64_t end = flightrec::MonotonicNs();
    const uint64_t took = tsc ? tscclock::ApproxTicksToNs(t1 - t0) : t1 - t0;
    // extra_skip 1: TimedCall's frame. The hook tail-called it, so the
    // stack starts at the application's caller; the reason names the call.
    flightrec::NoteBlock(end - took, end, flightrec::SockOpName(static_cast<uint8_t>(kOp)), 1);
    errno = saved_errno;
  }
}

// Where a call's bytes are (socket_prefix.h), from its arguments after the
// call: the buffer, the iovec array, the message, the first of the messages;
// nothing for sendfile and splice.
template <SockOp kOp, typename... A>
__attribute__((always_inline)) inline flightrec::sockpfx::Src PrefixSrc(A... args) {
  namespace pfx = flightrec::sockpfx;
  const auto first = std::get<0>(std::tie(args...));
  if constexpr (kOp == SockOp::kReadv || kOp == SockOp::kWritev) {
    return pfx::FromIov(first, std::get<1>(std::tie(args...)));
  } else if constexpr (kOp == SockOp::kSendmsg || kOp == SockOp::kRecvmsg) {
    return pfx::FromMsg(first);
  } else if constexpr (kOp == SockOp::kSendmmsg || kOp == SockOp::kRecvmmsg) {
    return pfx::FromMmsg(first, std::get<1>(std::tie(args...)));
  } else if constexpr (kOp == SockOp::kSendfile || kOp == SockOp::kSpliceIn || kOp == SockOp::kSpliceOut) {
    return pfx::Src{};
  } else {
    return pfx::FromBuf(first);
  }
}

// A recorded call: g_real_sock.*kFn(fd, args...) between two clock reads, then
// Note. Bytes moved are the result, or for the mmsg calls the sum of the
// msg_len the kernel filled in (args' first is the vector). errno is read only
// when the call failed; the push never changes it. On a socket whose entry
// allows it, the system call is made here instead of through libc's wrapper
// (socket_direct.h: one return after the kernel instead of two).
//
// Out of line and taking the arguments by value: the hooks' fast path (not a
// recorded socket: files, pipes, FLIGHTREC_SOCKETS=0) is then a table load
// and a tail call, with no registers to save and nothing spilled.
template <SockOp kOp, auto RealSocketFns::*kFn, typename... A>
__attribute__((noinline)) auto TimedCall(uint64_t entry, uint8_t flags, int fd, A... args) {
  using Result = decltype((g_real_sock.*kFn)(fd, args...));
  // One of our threads: never recorded. Once the flush thread has a
  // descriptor table of its own (own_fd_table.h), its numbers are not the
  // program's: its read of /proc/self/stat on its 3 was counted as 296
  // bytes received by the program's listener on 3. Checked here, past the
  // table lookup, so the path for descriptors that are not sockets stays a
  // load and a tail call.
  if (__builtin_expect((flightrec::t_thread_flags & flightrec::kThreadFlagRecorder) != 0, 0))
    return (g_real_sock.*kFn)(fd, args...);
  const uint64_t word = tscclock::TscWord();
  const bool tsc = tscclock::HooksReadTsc(word);
  if constexpr (sockdirect::kSyscallOf<kFn> >= 0) {
    // Its own copy of the push: one straight run of code from the system
    // call to the return measured ~9 ns faster than sharing the libc path's.
    if (sockfd::EntryDirect(entry)) {
      const uint64_t t0 = tscclock::Read(tsc);
      const long r = sockdirect::CallNonBlocking<kFn>(fd, args...);
      // Not a socket any more (a stale entry: see CallNonBlocking): the
      // call goes through libc below, blocking and cancellable as it should.
      if (__builtin_expect(r != -ENOTSOCK, 1)) {
        const uint64_t t1 = tscclock::Read(tsc);
        Note<kOp>(entry, flags, fd, word, tsc, t0, t1, r, PrefixSrc<kOp>(args...));
        if (__builtin_expect(r < 0, 0)) {
          errno = static_cast<int>(-r);  // as libc's wrapper sets it
          return Result{-1};
        }
        return static_cast<Result>(r);
      }
    }
  }
  const uint64_t t0 = tscclock::Read(tsc);
  const auto rc = (g_real_sock.*kFn)(fd, args...);
  const uint64_t t1 = tscclock::Read(tsc);
  int64_t result;
  if (rc < 0) {
    result = -static_cast<int64_t>(errno);
  } else if constexpr (kOp == SockOp::kSendmmsg || kOp == SockOp::kRecvmmsg) {
    result = MmsgBytes(std::get<0>(std::tie(args...)), static_cast<int>(rc));
  } else {
    result = static_cast<int64_t>(rc);
  }
  Note<kOp>(entry, flags, fd, word, tsc, t0, t1, result, PrefixSrc<kOp>(args...));
  return rc;
}

// Fast-path test: the entry of fd if this call is to be recorded, else 0.
inline uint64_t Recorded(int fd) { return sockhot::RecordedEntry(fd); }

inline uint8_t PeekFlag(int flags) { return (flags & MSG_PEEK) ? kOpFlagPeek : 0; }

}  // namespace

FR_HOOK ssize_t send(int fd, const void* buf, size_t n, int flags) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.send(fd, buf, n, flags);
  return TimedCall<SockOp::kSend, &RealSocketFns::send>(e, 0, fd, buf, n, flags);
}

FR_HOOK ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* addr, socklen_t len) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.sendto(fd, buf, n, flags, addr, len);
  return TimedCall<SockOp::kSendto, &RealSocketFns::sendto>(e, 0, fd, buf, n, flags, addr, len);
}

FR_HOOK ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.sendmsg(fd, msg, flags);
  return TimedCall<SockOp::kSendmsg, &RealSocketFns::sendmsg>(e, 0, fd, msg, flags);
}

FR_HOOK int sendmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.sendmmsg(fd, vec, vlen, flags);
  return TimedCall<SockOp::kSendmmsg, &RealSocketFns::sendmmsg>(e, 0, fd, vec, vlen, flags);
}

FR_HOOK ssize_t recv(int fd, void* buf, size_t n, int flags) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.recv(fd, buf, n, flags);
  return TimedCall<SockOp::kRecv, &RealSocketFns::recv>(e, PeekFlag(flags), fd, buf, n, flags);
}

FR_HOOK ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* addr, socklen_t* len) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.recvfrom(fd, buf, n, flags, addr, len);
  return TimedCall<SockOp::kRecvfrom, &RealSocketFns::recvfrom>(e, PeekFlag(flags), fd, buf, n, flags, addr, len);
}

FR_HOOK ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.recvmsg(fd, msg, flags);
  return TimedCall<SockOp::kRecvmsg, &RealSocketFns::recvmsg>(e, PeekFlag(flags), fd, msg, flags);
}

FR_HOOK int recvmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags, struct timespec* timeout) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.recvmmsg(fd, vec, vlen, flags, timeout);
  return TimedCall<SockOp::kRecvmmsg, &RealSocketFns::recvmmsg>(e, PeekFlag(flags), fd, vec, vlen, flags, timeout);
}

FR_HOOK ssize_t read(int fd, void* buf, size_t n) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) {
    // libunwind draining its address-check pipe, which is no descriptor.
    if (__builtin_expect(fd == flightrec::kValidationReadFd, 0)) return flightrec::ValidationPipeRead();
    return g_real_sock.read(fd, buf, n);
  }
  return TimedCall<SockOp::kRead, &RealSocketFns::read>(e, 0, fd, buf, n);
}

FR_HOOK ssize_t write(int fd, const void* buf, size_t n) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.write(fd, buf, n);
  return TimedCall<SockOp::kWrite, &RealSocketFns::write>(e, 0, fd, buf, n);
}

FR_HOOK ssize_t readv(int fd, const iovec* iov, int n) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.readv(fd, iov, n);
  return TimedCall<SockOp::kReadv, &RealSocketFns::readv>(e, 0, fd, iov, n);
}

FR_HOOK ssize_t writev(int fd, const iovec* iov, int n) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.writev(fd, iov, n);
  return TimedCall<SockOp::kWritev, &RealSocketFns::writev>(e, 0, fd, iov, n);
}

FR_HOOK ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  const uint64_t e = Recorded(out_fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.sendfile(out_fd, in_fd, offset, count);
  return TimedCall<SockOp::kSendfile, &RealSocketFns::sendfile>(e, 0, out_fd, in_fd, offset, count);
}

FR_HOOK ssize_t sendfile64(int out_fd, int in_fd, off_t* offset, size_t count) {
  const uint64_t e = Recorded(out_fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.sendfile64(out_fd, in_fd, offset, count);
  return TimedCall<SockOp::kSendfile, &RealSocketFns::sendfile64>(e, 0, out_fd, in_fd, offset, count);
}

FR_HOOK ssize_t splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len, unsigned flags) {
  // One end is a pipe: at most one is a socket.
  if (const uint64_t e = Recorded(fd_out); __builtin_expect(e != 0, 0))
    return TimedCall<SockOp::kSpliceOut, &RealSocketFns::splice_to>(e, 0, fd_out, fd_in, off_in, off_out, len, flags);
  if (const uint64_t e = Recorded(fd_in); __builtin_expect(e != 0, 0))
    return TimedCall<SockOp::kSpliceIn, &RealSocketFns::splice>(e, 0, fd_in, off_in, fd_out, off_out, len, flags);
  return g_real_sock.splice(fd_in, off_in, fd_out, off_out, len, flags);
}

// _FORTIFY_SOURCE builds call these instead of read/recv/recvfrom when the
// buffer size is known at compile time; glibc's versions call the syscall
// directly, so without these hooks a fortified service would be invisible.
FR_HOOK ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.read_chk(fd, buf, n, buflen);
  return TimedCall<SockOp::kRead, &RealSocketFns::read_chk>(e, 0, fd, buf, n, buflen);
}

FR_HOOK ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.recv_chk(fd, buf, n, buflen, flags);
  return TimedCall<SockOp::kRecv, &RealSocketFns::recv_chk>(e, PeekFlag(flags), fd, buf, n, buflen, flags);
}

FR_HOOK ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, sockaddr* addr, socklen_t* len) {
  const uint64_t e = Recorded(fd);
  if (__builtin_expect(!e, 1)) return g_real_sock.recvfrom_chk(fd, buf, n, buflen, flags, addr, len);
  return TimedCall<SockOp::kRecvfrom, &RealSocketFns::recvfrom_chk>(e, PeekFlag(flags), fd, buf, n, buflen, flags, addr,
                                                                    len);
}
