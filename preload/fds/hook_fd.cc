// fd interposers: close, close_range, closefrom, dup, dup2, dup3,
// fcntl/fcntl64 (F_DUPFD, F_DUPFD_CLOEXEC, F_SETFL), ioctl (FIONBIO), pipe
// and pipe2. Three jobs:
//  * keep the socket fd table right (a closed socket's entry is cleared
//    before the number is released; a dup'd socket fd names the same
//    connection; O_NONBLOCK decides whether data calls may skip libc's
//    wrapper, socket_direct.h) and record the closes and dups of tracked
//    sockets;
//  * the fd guard (fd_guard.h): the application's close/close_range/closefrom
//    skip flightrec's protected fds, and dup2/dup3 onto one of them lets the
//    application win and marks ours lost;
//  * libunwind's address-check pipe is faked (no descriptor at all,
//    validation_pipe.h); pipes made on one of flightrec's threads (libcurl's)
//    are moved into flightrec's fd range and protected (fd_guard.h); the
//    application's pipes are made exactly as libc makes them.
// Both work before init and with FLIGHTREC_SOCKETS=0 (the guard always; the
// table only when it is mapped). flightrec's own threads bypass all of it:
// their close really closes and unprotects.
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>

#include "preload/runtime/clock.h"
#include "preload/fds/fd_guard.h"
#include "preload/fds/released_fds.h"
#include "preload/fds/validation_pipe.h"
#include "preload/sockets/socket_direct.h"
#include "preload/sockets/socket_exchange.h"
#include "preload/sockets/socket_hot_path.h"
#include "preload/sockets/socket_real.h"

#define FR_HOOK extern "C" __attribute__((visibility("default")))

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

using flightrec::g_real_sock;
using flightrec::MonotonicNs;
using flightrec::SockOp;
namespace sockfd = flightrec::sockfd;
namespace sockhot = flightrec::sockhot;

namespace {

using flightrec::IsRecorderThread;

// Clears the table entries of tracked sockets in [first, last] and records
// their closes. Called before the real call releases the numbers. Protected
// fds are never sockets of the application, so they need no special case.
void ForgetSocketsInRange(unsigned first, unsigned last, uint64_t t0) {
  const int hw = sockfd::HighWater();
  if (hw == 0 || first >= static_cast<unsigned>(hw)) return;
  const unsigned end = last < static_cast<unsigned>(hw) ? last : static_cast<unsigned>(hw) - 1;
  bool owner_checked = false;
  const bool recording = sockhot::Recording();
  for (unsigned fd = first; fd <= end; ++fd) {
    if (sockfd::Lookup(static_cast<int>(fd)) == 0) continue;
    if (!owner_checked) {
      if (!sockhot::InOwnerProcess()) return;  // a vfork child: our table is not its table
      owner_checked = true;
    }
    if (flightrec::IsProtectedFd(static_cast<int>(fd))) continue;
    const uint64_t e = sockfd::Clear(static_cast<int>(fd));
    if (e && recording) flightrec::sockex::PushClose(static_cast<int>(fd), sockfd::EntryConn(e), t0, t0, 0);
  }
}

// close_range over [first, last] minus the protected fds: one real call per
// unprotected stretch. Returns the first failure (or 0).
int CloseRangeSkippingProtected(unsigned first, unsigned last, int flags) {
  const int phw = flightrec::ProtectedFdHighWater();
  int result = 0;
  int first_errno = 0;
  unsigned lo = first;
  const unsigned scan_end = phw > 0 && static_cast<unsigned>(phw) - 1 < last ? static_cast<unsigned>(phw) - 1 : last;
  for (unsigned fd = first; fd <= scan_end && lo <= last; ++fd) {
    if (!flightrec::IsProtectedFd(static_cast<int>(fd))) continue;
    if (fd > lo && g_real_sock.close_range(lo, fd - 1, flags) != 0 && result == 0) {
      result = -1;
      first_errno = errno;
    }
    if (fd == ~0U) return result;
    lo = fd + 1;
  }
  if (lo <= last && lo >= first && g_real_sock.close_range(lo, last, flags) != 0 && result == 0) {
    result = -1;
    first_errno = errno;
  }
  if (result != 0) errno = first_errno;
  return result;
}

bool AnyProtectedIn(unsigned first, unsigned last) {
  if (!flightrec::AnyProtectedFd()) return false;
  const int phw = flightrec::ProtectedFdHighWater();
  for (unsigned fd = first; fd <= last && fd < static_cast<unsigned>(phw); ++fd)
    if (flightrec::IsProtectedFd(static_cast<int>(fd))) return true;
  return false;
}

// After a successful dup-style call made newfd a copy of oldfd.
void NoteDup(int oldfd, int newfd, uint64_t old_entry, uint64_t replaced_entry, uint64_t t0, uint64_t t1) {
  if (replaced_entry && sockhot::Recording())  // dup2/dup3 closed the socket that was at newfd
    flightrec::sockex::PushClose(newfd, sockfd::EntryConn(replaced_entry), t0, t1, 0);
  if (old_entry) {
    // Two fds now reach one file: a flag change through either is not seen
    // through the other, so neither may skip libc's wrapper again.
    sockfd::UpdateFlags(oldfd, sockfd::EntryConn(old_entry), sockfd::kEntryShared, sockfd::kEntryDirect);
    sockfd::Set(newfd, (old_entry | sockfd::kEntryShared) & ~sockfd::kEntryDirect);
    if (sockhot::Recording())
      sockhot::PushOp(SockOp::kDup, newfd, sockfd::EntryConn(old_entry), t0, t1, newfd, 0,
                      static_cast<uint16_t>(oldfd & 0xffff));
  }
}

enum class DupCall : bool { kDup2 = false, kDup3 = true };
int Dup2Impl(int oldfd, int newfd, int flags, DupCall which) {
  auto call = [&] {
    return which == DupCall::kDup3 ? g_real_sock.dup3(oldfd, newfd, flags) : g_real_sock.dup2(oldfd, newfd);
  };
  if (IsRecorderThread() || oldfd == newfd) return call();
  // The application wins over our protected fd; the owner learns it was lost.
  if (flightrec::IsProtectedFd(newfd)) flightrec::MarkProtectedFdLost(newfd);
  const uint64_t old_entry = sockfd::Lookup(oldfd);
  const uint64_t new_entry = sockfd::Lookup(newfd);
  if ((old_entry == 0 && new_entry == 0) || !sockhot::Tracking()) return call();
  if (!sockhot::InOwnerProcess()) return call();
  const uint64_t t0 = MonotonicNs();
  const int rc = call();
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  if (rc >= 0) {
    // newfd never became free during the call, so updating after it is safe.
    const uint64_t replaced = new_entry ? sockfd::Clear(newfd) : 0;
    NoteDup(oldfd, newfd, old_entry, replaced, t0, t1);
  }
  errno = saved;
  return rc;
}

// F_SETFL on a tracked socket: whether its data calls may skip libc's
// wrapper follows O_NONBLOCK (socket_direct.h).
int SetFlags(int (*real)(int, int, ...), int fd, void* arg) {
  const uint64_t e = sockfd::Lookup(fd);
  const int rc = real(fd, F_SETFL, arg);
  if (rc == 0 && e != 0 && sockhot::Tracking())
    flightrec::sockdirect::SetDirect(fd, sockfd::EntryConn(e), (reinterpret_cast<intptr_t>(arg) & O_NONBLOCK) != 0);
  return rc;
}

int FcntlImpl(int (*real)(int, int, ...), int fd, int cmd, void* arg) {
  if (cmd == F_SETFL) return SetFlags(real, fd, arg);
  if (cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC) return real(fd, cmd, arg);
  const uint64_t e = sockfd::Lookup(fd);
  if (e == 0 || !sockhot::Tracking() || IsRecorderThread()) return real(fd, cmd, arg);
  const uint64_t t0 = MonotonicNs();
  const int rc = real(fd, cmd, arg);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  if (rc >= 0) NoteDup(fd, rc, e, 0, t0, t1);
  errno = saved;
  return rc;
}

}  // namespace

FR_HOOK int close(int fd) {
  // libdw closing a number the symbolizer already released for it: no longer
  // its file, possibly the application's (preload/fds/released_fds.h).
  if (__builtin_expect(flightrec::t_in_released_fd_scope, 0) && flightrec::SwallowReleasedClose(fd)) return 0;
  if (IsRecorderThread()) {
    flightrec::OwnFdChange change;  // no bulk close between the two
    flightrec::UnprotectFd(fd);
    return g_real_sock.close(fd);
  }
  // Keep ours open; to the application the fd is gone (see fd_guard.h).
  if (flightrec::AnyProtectedFd() && flightrec::IsProtectedFd(fd)) return 0;
  const uint64_t e = sockfd::Lookup(fd);
  if (e == 0 || !sockhot::Tracking() || !sockhot::InOwnerProcess()) return g_real_sock.close(fd);
  sockfd::Clear(fd);  // before the number is released
  const uint64_t t0 = MonotonicNs();
  const int rc = g_real_sock.close(fd);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  if (sockhot::Recording())
    flightrec::sockex::PushClose(fd, sockfd::EntryConn(e), t0, t1, rc < 0 ? -static_cast<int64_t>(saved) : 0);
  errno = saved;
  return rc;
}

FR_HOOK int close_range(unsigned first, unsigned last, int flags) {
  if (IsRecorderThread() || first > last || (flags & ~int(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE)) ||
      (flags & CLOSE_RANGE_CLOEXEC))  // CLOEXEC closes nothing now; at exec our fds go anyway
    return g_real_sock.close_range(first, last, flags);
  flightrec::BulkCloseScope closing;  // not between an open of ours and its protection
  if (sockhot::Tracking()) ForgetSocketsInRange(first, last, MonotonicNs());
  if (!AnyProtectedIn(first, last)) return g_real_sock.close_range(first, last, flags);
  return CloseRangeSkippingProtected(first, last, flags);
}

FR_HOOK void closefrom(int lowfd) {
  if (IsRecorderThread() || lowfd < 0) return g_real_sock.closefrom(lowfd);
  const unsigned first = static_cast<unsigned>(lowfd);
  flightrec::BulkCloseScope closing;
  if (sockhot::Tracking()) ForgetSocketsInRange(first, ~0U, MonotonicNs());
  if (!AnyProtectedIn(first, ~0U)) return g_real_sock.closefrom(lowfd);
  const int saved = errno;
  if (CloseRangeSkippingProtected(first, ~0U, 0) != 0 && errno == ENOSYS) {
    // No close_range (kernel < 5.9): close one by one up to the fd limit.
    rlimit rl{};
    const unsigned limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (1u << 20)
                               ? static_cast<unsigned>(rl.rlim_cur)
                               : (1u << 20);
    for (unsigned fd = first; fd < limit; ++fd)
      if (!flightrec::IsProtectedFd(static_cast<int>(fd))) g_real_sock.close(static_cast<int>(fd));
  }
  errno = saved;  // closefrom reports nothing
}

// The system call itself, as libc's wrappers make it (pipe is pipe2 with no
// flags on every architecture glibc's pipe2 exists for).
FR_HOOK int pipe2(int fds[2], int flags) {
  // libunwind's address-check pipe: two numbers that are no descriptors,
  // answered by the read and syscall hooks (validation_pipe.h).
  if (__builtin_expect(flightrec::InLibunwindInitScope(), 0) ||
      __builtin_expect(flightrec::CalledFromLibunwind(__builtin_return_address(0)), 0))
    return flightrec::MakeValidationPipe(fds);
  if (IsRecorderThread()) {
    flightrec::OwnFdChange opening;
    const int rc = static_cast<int>(syscall(SYS_pipe2, fds, flags));
    if (rc == 0) flightrec::TakeOwnFds(fds);
    return rc;
  }
  return static_cast<int>(syscall(SYS_pipe2, fds, flags));
}

FR_HOOK int pipe(int fds[2]) { return pipe2(fds, 0); }

FR_HOOK int dup(int oldfd) {
  const uint64_t e = sockfd::Lookup(oldfd);
  if (e == 0 || !sockhot::Tracking()) return g_real_sock.dup(oldfd);
  const uint64_t t0 = MonotonicNs();
  const int rc = g_real_sock.dup(oldfd);
  const int saved = errno;
  const uint64_t t1 = MonotonicNs();
  if (rc >= 0) NoteDup(oldfd, rc, e, 0, t0, t1);
  errno = saved;
  return rc;
}

FR_HOOK int dup2(int oldfd, int newfd) { return Dup2Impl(oldfd, newfd, 0, DupCall::kDup2); }
FR_HOOK int dup3(int oldfd, int newfd, int flags) { return Dup2Impl(oldfd, newfd, flags, DupCall::kDup3); }

FR_HOOK int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return FcntlImpl(g_real_sock.fcntl, fd, cmd, arg);
}

FR_HOOK int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return FcntlImpl(g_real_sock.fcntl64, fd, cmd, arg);
}

// ioctl's third argument is an int or a pointer; it travels as one word.
FR_HOOK int ioctl(int fd, unsigned long request, ...) noexcept {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  if (request != FIONBIO) return g_real_sock.ioctl(fd, request, arg);
  const uint64_t e = sockfd::Lookup(fd);
  const int rc = g_real_sock.ioctl(fd, request, arg);
  if (rc == 0 && e != 0 && arg && sockhot::Tracking())
    flightrec::sockdirect::SetDirect(fd, sockfd::EntryConn(e), *static_cast<const int*>(arg) != 0);
  return rc;
}
