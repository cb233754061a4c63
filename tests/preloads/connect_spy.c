// connect_spy.so: a test-only preload that writes down every network
// address the process tries to reach, loaded ahead of libflightrec.so:
//
//   LD_PRELOAD=build/preloads/connect_spy.so:build/libflightrec.so
//   CONNECT_SPY_LOG=/tmp/x.log   (one line per attempt: "connect 127.0.0.1 8080")
//
// It wraps connect, sendto and sendmsg (an address given to sendto/sendmsg
// is an unconnected UDP datagram, e.g. a DNS query) and hands each call on
// unchanged. Every library in the process resolves these names here first,
// libcurl included (the uploader dlopens it), so a test can prove that the
// recorder sent nothing anywhere, or only to loopback.
//
// Async-signal-safe: one O_APPEND write(2) per line, no malloc, no stdio.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int g_log_fd = -1;

__attribute__((constructor)) static void spy_init(void) {
  const char* path = getenv("CONNECT_SPY_LOG");
  if (path && *path) g_log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  // High number, out of the way of programs that count or close their descriptors.
  if (g_log_fd >= 0) {
    int high = fcntl(g_log_fd, F_DUPFD_CLOEXEC, 900);
    if (high >= 0) {
      close(g_log_fd);
      g_log_fd = high;
    }
  }
}

static void note(const char* what, const struct sockaddr* addr, socklen_t len) {
  if (g_log_fd < 0 || !addr) return;
  char line[160], host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
    const struct sockaddr_in* in = (const struct sockaddr_in*)addr;
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6* in6 = (const struct sockaddr_in6*)addr;
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  } else {
    return;  // AF_UNIX and others never leave the machine
  }
  size_t n = 0;
  const char* parts[] = {what, " ", host, " "};
  for (size_t i = 0; i < 4; i++) {
    size_t l = strlen(parts[i]);
    memcpy(line + n, parts[i], l);
    n += l;
  }
  char digits[8];
  int d = 0;
  do {
    digits[d++] = (char)('0' + port % 10);
    port /= 10;
  } while (port);
  while (d) line[n++] = digits[--d];
  line[n++] = '\n';
  ssize_t w = write(g_log_fd, line, n);
  (void)w;
}

int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  static int (*real)(int, const struct sockaddr*, socklen_t);
  if (!real) real = (int (*)(int, const struct sockaddr*, socklen_t))dlsym(RTLD_NEXT, "connect");
  note("connect", addr, len);
  return real(fd, addr, len);
}

ssize_t sendto(int fd, const void* buf, size_t n, int flags, const struct sockaddr* addr, socklen_t len) {
  static ssize_t (*real)(int, const void*, size_t, int, const struct sockaddr*, socklen_t);
  if (!real)
    real = (ssize_t(*)(int, const void*, size_t, int, const struct sockaddr*, socklen_t))dlsym(RTLD_NEXT, "sendto");
  note("sendto", addr, len);
  return real(fd, buf, n, flags, addr, len);
}

ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  static ssize_t (*real)(int, const struct msghdr*, int);
  if (!real) real = (ssize_t(*)(int, const struct msghdr*, int))dlsym(RTLD_NEXT, "sendmsg");
  if (msg) note("sendmsg", (const struct sockaddr*)msg->msg_name, msg->msg_namelen);
  return real(fd, msg, flags);
}
