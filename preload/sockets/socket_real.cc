// Real socket/fd functions (see socket_real.h): dlsym(RTLD_NEXT) resolution
// and the stubs that stand in until it has run.
#include "preload/sockets/socket_real.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>

#include "preload/runtime/hot_data.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

extern "C" void __chk_fail(void) __attribute__((noreturn));

namespace flightrec {
namespace {

__thread int t_resolving __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<bool> g_resolved{false};

// Each stub: resolve, then call the real function if one was found, else make
// the system call directly. (A stub still installed after resolution means
// dlsym found nothing: the syscall path is then permanent.)
#define FR_STUB_BODY(member, stub, call_real, fallback)                       \
  if (ResolveRealSocketFns() && g_real_sock.member != stub) return call_real; \
  return fallback;

int StubSocket(int d, int t, int p) {
  FR_STUB_BODY(socket, StubSocket, g_real_sock.socket(d, t, p), syscall(SYS_socket, d, t, p))
}
int StubSocketpair(int d, int t, int p, int* sv) {
  FR_STUB_BODY(socketpair, StubSocketpair, g_real_sock.socketpair(d, t, p, sv), syscall(SYS_socketpair, d, t, p, sv))
}
int StubConnect(int fd, const sockaddr* a, socklen_t l) {
  FR_STUB_BODY(connect, StubConnect, g_real_sock.connect(fd, a, l), syscall(SYS_connect, fd, a, l))
}
int StubBind(int fd, const sockaddr* a, socklen_t l) {
  FR_STUB_BODY(bind, StubBind, g_real_sock.bind(fd, a, l), syscall(SYS_bind, fd, a, l))
}
int StubListen(int fd, int b) {
  FR_STUB_BODY(listen, StubListen, g_real_sock.listen(fd, b), syscall(SYS_listen, fd, b))
}
int StubAccept(int fd, sockaddr* a, socklen_t* l) {
  FR_STUB_BODY(accept, StubAccept, g_real_sock.accept(fd, a, l), syscall(SYS_accept, fd, a, l))
}
int StubAccept4(int fd, sockaddr* a, socklen_t* l, int f) {
  FR_STUB_BODY(accept4, StubAccept4, g_real_sock.accept4(fd, a, l, f), syscall(SYS_accept4, fd, a, l, f))
}
int StubShutdown(int fd, int how) {
  FR_STUB_BODY(shutdown, StubShutdown, g_real_sock.shutdown(fd, how), syscall(SYS_shutdown, fd, how))
}
int StubClose(int fd) { FR_STUB_BODY(close, StubClose, g_real_sock.close(fd), syscall(SYS_close, fd)) }
int StubCloseRange(unsigned a, unsigned b, int f) {
  FR_STUB_BODY(close_range, StubCloseRange, g_real_sock.close_range(a, b, f), syscall(SYS_close_range, a, b, f))
}
void StubClosefrom(int low) {
  if (ResolveRealSocketFns() && g_real_sock.closefrom != StubClosefrom) return g_real_sock.closefrom(low);
  syscall(SYS_close_range, static_cast<unsigned>(low), ~0U, 0);
}
int StubDup(int fd) { FR_STUB_BODY(dup, StubDup, g_real_sock.dup(fd), syscall(SYS_dup, fd)) }
int StubDup2(int a, int b) { FR_STUB_BODY(dup2, StubDup2, g_real_sock.dup2(a, b), syscall(SYS_dup2, a, b)) }
int StubDup3(int a, int b, int f) {
  FR_STUB_BODY(dup3, StubDup3, g_real_sock.dup3(a, b, f), syscall(SYS_dup3, a, b, f))
}
// fcntl's third argument is an int or a pointer; it travels as one word.
int StubFcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  FR_STUB_BODY(fcntl, StubFcntl, g_real_sock.fcntl(fd, cmd, arg), syscall(SYS_fcntl, fd, cmd, arg))
}
int StubFcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  FR_STUB_BODY(fcntl64, StubFcntl64, g_real_sock.fcntl64(fd, cmd, arg), syscall(SYS_fcntl, fd, cmd, arg))
}
int StubIoctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  FR_STUB_BODY(ioctl, StubIoctl, g_real_sock.ioctl(fd, request, arg), syscall(SYS_ioctl, fd, request, arg))
}
ssize_t StubSend(int fd, const void* b, size_t n, int f){
    FR_STUB_BODY(send, StubSend, g_real_sock.send(fd, b, n, f), syscall(SYS_sendto, fd, b, n, f, nullptr, 0))} ssize_t
    StubSendto(int fd, const void* b, size_t n, int f, const sockaddr* a, socklen_t l){
        FR_STUB_BODY(sendto, StubSendto, g_real_sock.sendto(fd, b, n, f, a, l),
                     syscall(SYS_sendto, fd, b, n, f, a, l))} ssize_t StubSendmsg(int fd, const msghdr* m, int f) {
  FR_STUB_BODY(sendmsg, StubSendmsg, g_real_sock.sendmsg(fd, m, f), syscall(SYS_sendmsg, fd, m, f))
}
int StubSendmmsg(int fd, mmsghdr* v, unsigned n, int f){
    FR_STUB_BODY(sendmmsg, StubSendmmsg, g_real_sock.sendmmsg(fd, v, n, f), syscall(SYS_sendmmsg, fd, v, n, f))} ssize_t
    StubRecv(int fd, void* b, size_t n,
             int f){FR_STUB_BODY(recv, StubRecv, g_real_sock.recv(fd, b, n, f),
                                 syscall(SYS_recvfrom, fd, b, n, f, nullptr, nullptr))} ssize_t
    StubRecvfrom(int fd, void* b, size_t n, int f, sockaddr* a, socklen_t* l){
        FR_STUB_BODY(recvfrom, StubRecvfrom, g_real_sock.recvfrom(fd, b, n, f, a, l),
                     syscall(SYS_recvfrom, fd, b, n, f, a, l))} ssize_t StubRecvmsg(int fd, msghdr* m, int f) {
  FR_STUB_BODY(recvmsg, StubRecvmsg, g_real_sock.recvmsg(fd, m, f), syscall(SYS_recvmsg, fd, m, f))
}
int StubRecvmmsg(int fd, mmsghdr* v, unsigned n, int f,
                 struct timespec* t){FR_STUB_BODY(recvmmsg, StubRecvmmsg, g_real_sock.recvmmsg(fd, v, n, f, t),
                                                  syscall(SYS_recvmmsg, fd, v, n, f, t))} ssize_t
    StubRead(int fd, void* b,
             size_t n){FR_STUB_BODY(read, StubRead, g_real_sock.read(fd, b, n), syscall(SYS_read, fd, b, n))} ssize_t
    StubWrite(int fd, const void* b, size_t n){
        FR_STUB_BODY(write, StubWrite, g_real_sock.write(fd, b, n), syscall(SYS_write, fd, b, n))} ssize_t
    StubReadv(int fd, const iovec* v,
              int n){FR_STUB_BODY(readv, StubReadv, g_real_sock.readv(fd, v, n), syscall(SYS_readv, fd, v, n))} ssize_t
    StubWritev(int fd, const iovec* v, int n){
        FR_STUB_BODY(writev, StubWritev, g_real_sock.writev(fd, v, n), syscall(SYS_writev, fd, v, n))} ssize_t
    StubSendfile(int o, int i, off_t* off,
                 size_t n){FR_STUB_BODY(sendfile, StubSendfile, g_real_sock.sendfile(o, i, off, n),
                                        syscall(SYS_sendfile, o, i, off, n))} ssize_t
    StubSendfile64(int o, int i, off_t* off,
                   size_t n){FR_STUB_BODY(sendfile64, StubSendfile64, g_real_sock.sendfile64(o, i, off, n),
                                          syscall(SYS_sendfile, o, i, off, n))} ssize_t
    StubSplice(int i, loff_t* oi, int o, loff_t* oo, size_t n,
               unsigned f){FR_STUB_BODY(splice, StubSplice, g_real_sock.splice(i, oi, o, oo, n, f),
                                        syscall(SYS_splice, i, oi, o, oo, n, f))} ssize_t
    SpliceTo(int sock, int fd_in, loff_t* off_in, loff_t* off_out, size_t n, unsigned f) {
  return g_real_sock.splice(fd_in, off_in, sock, off_out, n, f);
}
ssize_t StubReadChk(int fd, void* b, size_t n, size_t buflen) {
  if (ResolveRealSocketFns() && g_real_sock.read_chk != StubReadChk) return g_real_sock.read_chk(fd, b, n, buflen);
  if (n > buflen) __chk_fail();
  return syscall(SYS_read, fd, b, n);
}
ssize_t StubRecvChk(int fd, void* b, size_t n, size_t buflen, int f) {
  if (ResolveRealSocketFns() && g_real_sock.recv_chk != StubRecvChk) return g_real_sock.recv_chk(fd, b, n, buflen, f);
  if (n > buflen) __chk_fail();
  return syscall(SYS_recvfrom, fd, b, n, f, nullptr, nullptr);
}
ssize_t StubRecvfromChk(int fd, void* b, size_t n, size_t buflen, int f, sockaddr* a, socklen_t* l) {
  if (ResolveRealSocketFns() && g_real_sock.recvfrom_chk != StubRecvfromChk)
    return g_real_sock.recvfrom_chk(fd, b, n, buflen, f, a, l);
  if (n > buflen) __chk_fail();
  return syscall(SYS_recvfrom, fd, b, n, f, a, l);
}

#undef FR_STUB_BODY

template <typename Fn>
void Load(Fn* slot, const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p) __atomic_store_n(slot, reinterpret_cast<Fn>(p), __ATOMIC_RELEASE);
}

}  // namespace

FR_HOT_DATA RealSocketFns g_real_sock = {
    .read = StubRead,
    .write = StubWrite,
    .recv = StubRecv,
    .send = StubSend,
    .readv = StubReadv,
    .writev = StubWritev,
    .recvfrom = StubRecvfrom,
    .sendto = StubSendto,
    .recvmsg = StubRecvmsg,
    .sendmsg = StubSendmsg,
    .recvmmsg = StubRecvmmsg,
    .sendmmsg = StubSendmmsg,
    .read_chk = StubReadChk,
    .recv_chk = StubRecvChk,
    .recvfrom_chk = StubRecvfromChk,
    .sendfile = StubSendfile,
    .sendfile64 = StubSendfile64,
    .splice = StubSplice,
    .splice_to = SpliceTo,
    .close = StubClose,
    .socket = StubSocket,
    .socketpair = StubSocketpair,
    .connect = StubConnect,
    .bind = StubBind,
    .listen = StubListen,
    .accept = StubAccept,
    .accept4 = StubAccept4,
    .shutdown = StubShutdown,
    .close_range = StubCloseRange,
    .closefrom = StubClosefrom,
    .dup = StubDup,
    .dup2 = StubDup2,
    .dup3 = StubDup3,
    .fcntl = StubFcntl,
    .fcntl64 = StubFcntl64,
    .ioctl = StubIoctl,
};

bool ResolveRealSocketFns() {
  if (g_resolved.load(std::memory_order_acquire)) return true;
  if (t_resolving) return false;  // dlsym re-entered one of our hooks
  t_resolving = 1;
  RealSocketFns& r = g_real_sock;
  Load(&r.socket, "socket");
  Load(&r.socketpair, "socketpair");
  Load(&r.connect, "connect");
  Load(&r.bind, "bind");
  Load(&r.listen, "listen");
  Load(&r.accept, "accept");
  Load(&r.accept4, "accept4");
  Load(&r.shutdown, "shutdown");
  Load(&r.close, "close");
  Load(&r.close_range, "close_range");
  Load(&r.closefrom, "closefrom");
  Load(&r.dup, "dup");
  Load(&r.dup2, "dup2");
  Load(&r.dup3, "dup3");
  Load(&r.fcntl, "fcntl");
  Load(&r.fcntl64, "fcntl64");
  Load(&r.ioctl, "ioctl");
  Load(&r.send, "send");
  Load(&r.sendto, "sendto");
  Load(&r.sendmsg, "sendmsg");
  Load(&r.sendmmsg, "sendmmsg");
  Load(&r.recv, "recv");
  Load(&r.recvfrom, "recvfrom");
  Load(&r.recvmsg, "recvmsg");
  Load(&r.recvmmsg, "recvmmsg");
  Load(&r.read, "read");
  Load(&r.write, "write");
  Load(&r.readv, "readv");
  Load(&r.writev, "writev");
  Load(&r.sendfile, "sendfile");
  Load(&r.sendfile64, "sendfile64");
  Load(&r.splice, "splice");
  Load(&r.read_chk, "__read_chk");
  Load(&r.recv_chk, "__recv_chk");
  Load(&r.recvfrom_chk, "__recvfrom_chk");
  t_resolving = 0;
  g_resolved.store(true, std::memory_order_release);
  return true;
}

}  // namespace flightrec
