// Real socket/fd functions: the libc definitions our socket and fd hooks
// forward to, found with dlsym(RTLD_NEXT) once at init (ResolveRealSocketFns
// from SocketsInit).
//
// A hook can run before init (another library's constructor calling read() or
// close()). Every pointer therefore starts at a stub that resolves all
// pointers on first use and calls through; if resolution is already running
// on this thread (dlsym re-entering a hook) or a symbol is missing, the stub
// makes the system call itself, so a hook never calls a null pointer and
// never recurses.
#pragma once
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace flightrec {

// Ordered by how often a typical service calls them: the data calls first, so
// the few a hook needs share a cache line (with the fd table's pointer, see
// hot_data.h).
struct RealSocketFns {
  ssize_t (*read)(int, void*, size_t);
  ssize_t (*write)(int, const void*, size_t);
  ssize_t (*recv)(int, void*, size_t, int);
  ssize_t (*send)(int, const void*, size_t, int);
  ssize_t (*readv)(int, const iovec*, int);
  ssize_t (*writev)(int, const iovec*, int);
  ssize_t (*recvfrom)(int, void*, size_t, int, sockaddr*, socklen_t*);
  ssize_t (*sendto)(int, const void*, size_t, int, const sockaddr*, socklen_t);
  ssize_t (*recvmsg)(int, msghdr*, int);
  ssize_t (*sendmsg)(int, const msghdr*, int);
  int (*recvmmsg)(int, mmsghdr*, unsigned, int, struct timespec*);
  int (*sendmmsg)(int, mmsghdr*, unsigned, int);
  ssize_t (*read_chk)(int, void*, size_t, size_t);
  ssize_t (*recv_chk)(int, void*, size_t, size_t, int);
  ssize_t (*recvfrom_chk)(int, void*, size_t, size_t, int, sockaddr*, socklen_t*);
  ssize_t (*sendfile)(int, int, off_t*, size_t);
  ssize_t (*sendfile64)(int, int, off_t*, size_t);
  ssize_t (*splice)(int, loff_t*, int, loff_t*, size_t, unsigned);
  // splice with the socket as the destination, passed first (as every data
  // hook passes its socket): calls splice(fd_in, off_in, sock, off_out, ...).
  ssize_t (*splice_to)(int sock, int fd_in, loff_t* off_in, loff_t* off_out, size_t, unsigned);
  int (*close)(int);
  int (*socket)(int, int, int);
  int (*socketpair)(int, int, int, int*);
  int (*connect)(int, const sockaddr*, socklen_t);
  int (*bind)(int, const sockaddr*, socklen_t);
  int (*listen)(int, int);
  int (*accept)(int, sockaddr*, socklen_t*);
  int (*accept4)(int, sockaddr*, socklen_t*, int);
  int (*shutdown)(int, int);
  int (*close_range)(unsigned, unsigned, int);
  void (*closefrom)(int);
  int (*dup)(int);
  int (*dup2)(int, int);
  int (*dup3)(int, int, int);
  int (*fcntl)(int, int, ...);
  int (*fcntl64)(int, int, ...);
  int (*ioctl)(int, unsigned long, ...);
};

// Never null members; see the file comment.
extern RealSocketFns g_real_sock;

// Resolves every member with dlsym(RTLD_NEXT). Safe to call more than once and
// from several threads; returns false when re-entered on this thread.
bool ResolveRealSocketFns();

}  // namespace flightrec
