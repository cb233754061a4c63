// Socket direct calls: the data hooks' way past libc's wrapper, for calls on
// sockets that cannot block.
//
// Why. A recorded call that goes through libc's send/recv costs ~40 ns more
// than the call alone (bench/micro/sock_bench), and most of that is not the
// recording. After a system call the CPU's return predictor holds the
// kernel's entries, not ours, so every `ret` taken after the kernel returns
// mispredicts: through libc there are two (libc's wrapper back into the hook,
// the hook back to the application) where the application alone has one. In a
// multi-threaded process libc's wrapper also switches the thread to
// asynchronous cancellation and back around the call. A hook that makes the
// system call itself (the same call libc's wrapper makes: send is sendto with
// no address, recv is recvfrom) returns once, as the application would.
//
// When. Besides the system call, libc's wrapper does one thing: it makes the
// call a pthread cancellation point, so a thread blocked in it can be
// cancelled. A direct call is therefore made only when it cannot block while
// another thread cancels this one; the fd table's kEntryDirect bit
// (socket_fd_table.h) says so, and is set only while all of these hold:
//   * the socket's file is O_NONBLOCK, as socket/socketpair/accept4 flags,
//     fcntl(F_SETFL) or ioctl(FIONBIO) on this fd set it, and no other fd
//     refers to the file (a dup'd socket never gets the bit again: a flag
//     change through the other fd would go unseen);
//   * pthread_cancel has never been called in this process: the first call
//     turns direct calls off for good, before it cancels anything;
//   * each function a hook forwards to is libc's own (an interposer loaded
//     after us, a sanitizer's or a test double keeps every call);
//   * FLIGHTREC_SOCKET_DIRECT is not 0.
// Only read, write, readv, writev, send, sendto, sendmsg, recv, recvfrom and
// recvmsg have a direct form; errno is set as libc's wrapper sets it.
//
// A stale bit (the socket closed inside libc, past our close hook, and the
// number reused) can never make a direct call block: the call is always sent
// with MSG_DONTWAIT (CallNonBlocking below), and a number that is no longer
// a socket answers ENOTSOCK and goes through libc. Not seen: a blocking
// socket made past our hooks on a reused number, or another process sharing
// the file clearing its O_NONBLOCK: such a call returns EAGAIN at once.
//
// Threads: Allowed() and the Call functions are for any thread
// (async-signal-safe); Init is for socket init, DisableForCancel for the
// pthread_cancel hook.
#pragma once
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <cerrno>
#include <tuple>

#include <cstdint>
#include <type_traits>

#include "preload/sockets/socket_fd_table.h"
#include "preload/sockets/socket_real.h"

namespace flightrec::sockdirect {

// At socket init, after the real functions are resolved: turns direct calls
// on when `allowed` and every data function with a direct form is libc's own.
// Returns whether they are on.
bool Init(bool allowed);

// Direct calls are on: the fd-setting hooks may set kEntryDirect.
bool Allowed();

// The pthread_cancel hook, before the real call: direct calls off for good,
// and kEntryDirect cleared from every entry (a hook that set it concurrently
// sees the switch off and clears its own: SetDirect below).
void DisableForCancel();

// After a successful flag change on a tracked socket (conn as in its entry):
// sets kEntryDirect when `nonblocking`, direct calls are on and the fd is not
// shared; clears it otherwise.
void SetDirect(int fd, uint64_t conn, bool nonblocking);

// After storing a new entry that has kEntryDirect (a socket created
// non-blocking): clears it again if direct calls went off meanwhile.
void StoredDirect(int fd, uint64_t entry);

// The system call number of the direct form of real function kFn, or -1.
template <auto kFn>
inline constexpr long kSyscallOf = -1;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::read> = SYS_read;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::write> = SYS_write;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::readv> = SYS_readv;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::writev> = SYS_writev;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::recv> = SYS_recvfrom;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::send> = SYS_sendto;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::recvfrom> = SYS_recvfrom;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::sendto> = SYS_sendto;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::recvmsg> = SYS_recvmsg;
template <>
inline constexpr long kSyscallOf<&RealSocketFns::sendmsg> = SYS_sendmsg;

template <typename T>
inline long Word(T v) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<long>(v);
  } else {
    return static_cast<long>(v);
  }
}

// The kernel's answer: a count, or -errno.
inline long Syscall6(long nr, long a, long b, long c, long d = 0, long e = 0, long f = 0) {
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}

// The direct form of g_real_sock.*kFn(fd, args...). What it sends to the kernel: the socket form of the
// call with MSG_DONTWAIT added, so it can never block whatever the fd is now.
// An fd-table entry can be stale (a socket closed inside libc, past our close
// hook: fclose(fdopen(fd)); the number reused by a pipe or a file): the raw
// read it would have made then blocked outside libc's cancellation points,
// and pthread_cancel never took effect. With MSG_DONTWAIT a file that is not
// a socket answers -ENOTSOCK (the hook then makes the ordinary libc call),
// and on the non-blocking socket the entry describes nothing changes: read
// is recvfrom with no flags, write is sendto, readv/writev are
// recvmsg/sendmsg with the same iovecs, and O_NONBLOCK already meant
// MSG_DONTWAIT. Returns the kernel's answer.
inline long NonBlockingMsg(long nr, int fd, const struct iovec* iov, int n) {
  struct msghdr msg {};
  msg.msg_iov = const_cast<struct iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n < 0 ? 0 : n);
  return Syscall6(nr, fd, Word(&msg), MSG_DONTWAIT);
}
// kFn is kOther (member pointers of different types never compare equal).
template <auto kFn, auto kOther>
constexpr bool IsFn() {
  if constexpr (std::is_same_v<decltype(kFn), decltype(kOther)>) {
    return kFn == kOther;
  } else {
    return false;
  }
}
template <auto kFn, typename... A>
inline long CallNonBlocking(int fd, A... args) {
  static_assert(kSyscallOf<kFn> >= 0, "no direct form");
  if constexpr (IsFn<kFn, &RealSocketFns::read>() || IsFn<kFn, &RealSocketFns::write>()) {
    const auto [buf, n] = std::make_tuple(args...);
    return Syscall6(IsFn<kFn, &RealSocketFns::read>() ? SYS_recvfrom : SYS_sendto, fd, Word(buf), Word(n),
                    MSG_DONTWAIT);
  } else if constexpr (IsFn<kFn, &RealSocketFns::readv>() || IsFn<kFn, &RealSocketFns::writev>()) {
    const auto [iov, n] = std::make_tuple(args...);
    return NonBlockingMsg(IsFn<kFn, &RealSocketFns::readv>() ? SYS_recvmsg : SYS_sendmsg, fd, iov, n);
  } else if constexpr (IsFn<kFn, &RealSocketFns::send>() || IsFn<kFn, &RealSocketFns::recv>()) {
    const auto [buf, n, flags] = std::make_tuple(args...);
    return Syscall6(kSyscallOf<kFn>, fd, Word(buf), Word(n), Word(flags | MSG_DONTWAIT));
  } else if constexpr (IsFn<kFn, &RealSocketFns::sendto>() || IsFn<kFn, &RealSocketFns::recvfrom>()) {
    const auto [buf, n, flags, addr, len] = std::make_tuple(args...);
    return Syscall6(kSyscallOf<kFn>, fd, Word(buf), Word(n), Word(flags | MSG_DONTWAIT), Word(addr), Word(len));
  } else {  // sendmsg, recvmsg
    const auto [msg, flags] = std::make_tuple(args...);
    return Syscall6(kSyscallOf<kFn>, fd, Word(msg), Word(flags | MSG_DONTWAIT));
  }
}

}  // namespace flightrec::sockdirect
