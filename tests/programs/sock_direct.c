// sock_direct: what the socket hooks' direct system calls (preload/sockets/socket_direct.h)
// must keep exactly as libc's wrappers do.
//
//   sock_direct calls
//       On a SOCK_NONBLOCK socketpair: every data call with a direct form
//       (read, write, readv, writev, send, recv, sendto, recvfrom, sendmsg,
//       recvmsg) moves known bytes; a successful call leaves errno alone; an
//       empty socket answers -1/EAGAIN; a send to a closed peer -1/EPIPE.
//       Prints "sent=N received=N eagain=N epipe=N" and exits 0 when every
//       answer was right.
//   sock_direct cancel MODE
//       A thread blocks in recv() on a socket that is blocking by the time it
//       does; the main thread cancels it and joins. MODE says how the socket
//       got there: "blocking" (created so), "fcntl" (created non-blocking,
//       made blocking with fcntl F_SETFL), "ioctl" (created non-blocking,
//       FIONBIO off, on, off),
//       "dup" (non-blocking, then made blocking through a dup'd fd: the fd
//       the thread reads never saw the change). Prints "cancelled" and exits
//       0; a cancel that does not interrupt the recv leaves the join hanging
//       until alarm() kills the program.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static void fail(const char* what) {
  fprintf(stderr, "sock_direct: %s (errno %d)\n", what, errno);
  exit(1);
}

// A successful call must leave errno as it found it.
#define EXPECT_BYTES(call, n)                  \
  do {                                         \
    errno = 4321;                              \
    if ((call) != (ssize_t)(n)) fail(#call);   \
    if (errno != 4321) fail("errno changed: " #call); \
  } while (0)

static int calls(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) fail("socketpair");
  char out[512], in[512];
  memset(out, 'x', sizeof(out));
  long sent = 0, received = 0, eagain = 0, epipe = 0;

  EXPECT_BYTES(write(sv[0], out, 100), 100);
  EXPECT_BYTES(read(sv[1], in, sizeof(in)), 100);
  sent += 100, received += 100;

  struct iovec wv[2] = {{out, 30}, {out, 40}};
  struct iovec rv[2] = {{in, 50}, {in + 50, 100}};
  EXPECT_BYTES(writev(sv[0], wv, 2), 70);
  EXPECT_BYTES(readv(sv[1], rv, 2), 70);
  sent += 70, received += 70;

  EXPECT_BYTES(send(sv[0], out, 200, 0), 200);
  EXPECT_BYTES(recv(sv[1], in, sizeof(in), 0), 200);
  sent += 200, received += 200;

  EXPECT_BYTES(sendto(sv[0], out, 33, 0, NULL, 0), 33);
  EXPECT_BYTES(recvfrom(sv[1], in, sizeof(in), 0, NULL, NULL), 33);
  sent += 33, received += 33;

  struct iovec mv = {out, 77};
  struct msghdr m = {.msg_iov = &mv, .msg_iovlen = 1};
  EXPECT_BYTES(sendmsg(sv[0], &m, 0), 77);
  struct iovec mr = {in, sizeof(in)};
  struct msghdr r = {.msg_iov = &mr, .msg_iovlen = 1};
  EXPECT_BYTES(recvmsg(sv[1], &r, 0), 77);
  sent += 77, received += 77;

  // Nothing left to read: each call answers would-block, as libc reports it.
  errno = 0;
  if (recv(sv[1], in, sizeof(in), 0) != -1 || errno != EAGAIN) fail("recv on an empty socket");
  ++eagain;
  errno = 0;
  if (read(sv[1], in, sizeof(in)) != -1 || errno != EAGAIN) fail("read on an empty socket");
  ++eagain;

  // The peer is gone: send reports EPIPE (MSG_NOSIGNAL: no SIGPIPE).
  close(sv[1]);
  errno = 0;
  if (send(sv[0], out, 10, MSG_NOSIGNAL) != -1 || errno != EPIPE) fail("send to a closed peer");
  ++epipe;
  close(sv[0]);
  printf("sent=%ld received=%ld eagain=%ld epipe=%ld\n", sent, received, eagain, epipe);
  return 0;
}

static int g_blocked_fd = -1;

static void* blocked_reader(void* arg) {
  (void)arg;
  char c;
  recv(g_blocked_fd, &c, 1, 0);  // nothing is ever sent: only a cancel ends this
  return NULL;
}

static int cancel(const char* mode) {
  int sv[2];
  const int nonblock = strcmp(mode, "blocking") != 0 ? SOCK_NONBLOCK : 0;
  if (socketpair(AF_UNIX, SOCK_STREAM | nonblock, 0, sv) != 0) fail("socketpair");
  if (strcmp(mode, "fcntl") == 0) {
    if (fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) & ~O_NONBLOCK) != 0) fail("fcntl");
  } else if (strcmp(mode, "ioctl") == 0) {
    int off = 0, on = 1;
    if (ioctl(sv[0], FIONBIO, &off) != 0 || ioctl(sv[0], FIONBIO, &on) != 0 || ioctl(sv[0], FIONBIO, &off) != 0)
      fail("ioctl");
  } else if (strcmp(mode, "dup") == 0) {
    const int other = dup(sv[0]);
    if (other < 0 || fcntl(other, F_SETFL, 0) != 0) fail("dup+fcntl");
  } else if (strcmp(mode, "blocking") != 0) {
    fprintf(stderr, "sock_direct: unknown cancel mode %s\n", mode);
    return 2;
  }
  // A few exchanges first, so the socket's calls were recorded before.
  char c = 'c';
  for (int i = 0; i < 3; ++i)
    if (send(sv[1], &c, 1, 0) != 1 || recv(sv[0], &c, 1, 0) != 1) fail("exchange");
  g_blocked_fd = sv[0];
  alarm(10);
  pthread_t t;
  if (pthread_create(&t, NULL, blocked_reader, NULL) != 0) fail("pthread_create");
  usleep(200 * 1000);  // let it block
  if (pthread_cancel(t) != 0) fail("pthread_cancel");
  void* result = NULL;
  if (pthread_join(t, &result) != 0) fail("pthread_join");
  if (result != PTHREAD_CANCELED) fail("not cancelled");
  printf("cancelled\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "calls") == 0) return calls();
  if (argc >= 3 && strcmp(argv[1], "cancel") == 0) return cancel(argv[2]);
  fprintf(stderr, "usage: sock_direct calls | cancel blocking|fcntl|ioctl|dup\n");
  return 2;
}
