// sock_misc: socket scenarios for the socket tests, one per subcommand, each
// printing the numbers the test checks against the trace.
//
//   sock_misc epoll CONNS ROUNDS   non-blocking event-loop server (epoll,
//                                  accept4 SOCK_NONBLOCK) reading until EAGAIN;
//                                  blocking client threads
//   sock_misc unix                 unix stream socket by path, and a socketpair
//   sock_misc udp                  UDP: sendto/recvfrom, sendmmsg/recvmmsg,
//                                  a connected UDP client with send/recv
//   sock_misc connfail             blocking and non-blocking connect to a closed port
//   sock_misc dup                  a client socket used through dup, dup2, dup3 and
//                                  fcntl(F_DUPFD_CLOEXEC) copies; then a pipe
//                                  dup2'd over one of them
//   sock_misc fork                 the parent listens, a forked child accepts and
//                                  serves one connection (an inherited listener)
//   sock_misc splice               a socketpair fed and drained through pipes with
//                                  splice (as a proxy moves bytes): 300000 bytes
//                                  pipe -> socket -> pipe, the pipes' ends moved
//                                  with plain read/write
//   sock_misc handoff ROUNDS       a connection read by a thread that had slept
//                                  (300 ms: the recorder passes over its quiet
//                                  slot) and then answered and closed at once by
//                                  a thread that never stops making socket calls;
//                                  ROUNDS connections, 100 bytes in, 200 out each
//   sock_misc closeall MODE        TCP exchange, then close every fd
//   sock_misc closestorm MS         daemon-style close_range/closefrom storm, MS long,
//                                   next to 100 idle threads, checking its own pipes
//                                  (MODE: range = close_range(3, ~0U, 0),
//                                  loop = close() on 3..1023, from = closefrom(3)),
//                                  then another TCP exchange; prints how many
//                                  pipes were open before the close (the program
//                                  opens none; a library loaded into it may) and
//                                  how many of those were still pipes after it
// Exit status 0 when the program itself saw what it expected.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char* what) {
  perror(what);
  exit(1);
}

static int tcp_listener(struct sockaddr_in* addr, int flags) {
  int l = socket(AF_INET, SOCK_STREAM | flags, 0);
  if (l < 0) die("socket");
  memset(addr, 0, sizeof(*addr));
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(*addr);
  if (bind(l, (struct sockaddr*)addr, len) != 0 || listen(l, 128) != 0) die("bind/listen");
  getsockname(l, (struct sockaddr*)addr, &len);
  return l;
}

static int tcp_connect(const struct sockaddr_in* addr) {
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || connect(c, (const struct sockaddr*)addr, sizeof(*addr)) != 0) die("connect");
  return c;
}

static void write_all(int fd, const char* p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) die("write");
    p += w;
    n -= (size_t)w;
  }
}

static void read_all(int fd, char* p, size_t n) {
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) die("read");
    p += r;
    n -= (size_t)r;
  }
}

// ---- epoll ------------------------------------------------------------------

enum { kMsg = 300 };
static struct sockaddr_in g_addr;
static int g_rounds;

static void* epoll_client(void* arg) {
  (void)arg;
  int c = tcp_connect(&g_addr);
  char buf[kMsg];
  memset(buf, 'e', sizeof(buf));
  for (int i = 0; i < g_rounds; ++i) {
    write_all(c, buf, sizeof(buf));
    read_all(c, buf, sizeof(buf));
  }
  close(c);
  return NULL;
}

static int cmd_epoll(int conns, int rounds) {
  g_rounds = rounds;
  int l = tcp_listener(&g_addr, SOCK_NONBLOCK);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = l};
  epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
  pthread_t* th = calloc((size_t)conns, sizeof(pthread_t));
  for (int i = 0; i < conns; ++i) pthread_create(&th[i], NULL, epoll_client, NULL);
  long eagain = 0, accept_eagain = 0, bytes_in = 0, bytes_out = 0, closed = 0, accepted = 0;
  while (closed < conns) {
    struct epoll_event evs[16];
    int n = epoll_wait(ep, evs, 16, 5000);
    if (n <= 0) die("epoll_wait timed out");
    for (int i = 0; i < n; ++i) {
      int fd = evs[i].data.fd;
      if (fd == l) {
        for (;;) {  // drain the accept queue until it would block
          int c = accept4(l, NULL, NULL, SOCK_NONBLOCK);
          if (c < 0) {
            if (errno == EAGAIN) {
              accept_eagain++;
              break;
            }
            die("accept4");
          }
          accepted++;
          struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        }
        continue;
      }
      char buf[4096];
      for (;;) {  // read until EAGAIN (edge of the data) or EOF
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r > 0) {
          bytes_in += r;
          ssize_t w = send(fd, buf, (size_t)r, 0);  // small echoes fit the socket buffer
          if (w != r) die("send");
          bytes_out += w;
          continue;
        }
        if (r < 0 && errno == EAGAIN) {
          eagain++;
          break;
        }
        if (r < 0) die("recv");
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        closed++;
        break;
      }
    }
  }
  for (int i = 0; i < conns; ++i) pthread_join(th[i], NULL);
  close(ep);
  close(l);
  printf("epoll accepted=%ld server_in=%ld server_out=%ld recv_eagain=%ld accept_eagain=%ld\n", accepted,
         bytes_in, bytes_out, eagain, accept_eagain);
  return 0;
}

// ---- unix -------------------------------------------------------------------

static int cmd_unix(void) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof(a.sun_path), "/tmp/sock_misc.%d", getpid());
  unlink(a.sun_path);
  int l = socket(AF_UNIX, SOCK_STREAM, 0);
  if (bind(l, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(l, 4) != 0) die("unix bind/listen");
  int c = socket(AF_UNIX, SOCK_STREAM, 0);
  if (connect(c, (struct sockaddr*)&a, sizeof(a)) != 0) die("unix connect");
  int s = accept(l, NULL, NULL);
  char buf[1000];
  memset(buf, 'u', sizeof(buf));
  write_all(c, buf, 777);
  read_all(s, buf, 777);
  write_all(s, buf, 555);
  read_all(c, buf, 555);
  close(c);
  close(s);
  close(l);
  unlink(a.sun_path);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
  write_all(sv[0], buf, 123);
  read_all(sv[1], buf, 123);
  close(sv[0]);
  close(sv[1]);
  printf("unix path=%s client_out=777 client_in=555 pair_bytes=123\n", a.sun_path);
  return 0;
}

// ---- splice -----------------------------------------------------------------

static int cmd_splice(void) {
  int sv[2], in[2], out[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || pipe(in) != 0 || pipe(out) != 0) die("splice setup");
  char buf[10000];
  memset(buf, 's', sizeof(buf));
  long total = 300000, moved_out = 0, moved_in = 0, splice_out_calls = 0, splice_in_calls = 0;
  while (moved_in < total) {
    if (moved_out < total) {
      write_all(in[1], buf, sizeof(buf));  // pipe <- program
      long left = sizeof(buf);
      while (left > 0) {  // pipe -> socket
        ssize_t n = splice(in[0], NULL, sv[0], NULL, (size_t)left, 0);
        if (n <= 0) die("splice to socket");
        left -= n;
        moved_out += n;
        splice_out_calls++;
      }
    }
    while (moved_in < moved_out) {  // socket -> pipe -> program
      ssize_t n = splice(sv[1], NULL, out[1], NULL, (size_t)(moved_out - moved_in), 0);
      if (n <= 0) die("splice from socket");
      read_all(out[0], buf, (size_t)n);
      moved_in += n;
      splice_in_calls++;
    }
  }
  close(sv[0]);
  close(sv[1]);
  printf("splice out=%ld in=%ld out_calls=%ld in_calls=%ld\n", moved_out, moved_in, splice_out_calls,
         splice_in_calls);
  return moved_out == total && moved_in == total ? 0 : 1;
}

// ---- udp --------------------------------------------------------------------

static int cmd_udp(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  socklen_t len = sizeof(a);
  if (bind(s, (struct sockaddr*)&a, len) != 0) die("udp bind");
  getsockname(s, (struct sockaddr*)&a, &len);
  int c = socket(AF_INET, SOCK_DGRAM, 0);
  char buf[2048];
  memset(buf, 'd', sizeof(buf));
  long sent = 0, received = 0;
  for (int i = 0; i < 10; ++i) {  // sendto / recvfrom
    ssize_t w = sendto(c, buf, 100 + (size_t)i, 0, (struct sockaddr*)&a, sizeof(a));
    if (w < 0) die("sendto");
    sent += w;
    struct sockaddr_in from;
    socklen_t fl = sizeof(from);
    ssize_t r = recvfrom(s, buf, sizeof(buf), 0, (struct sockaddr*)&from, &fl);
    if (r < 0) die("recvfrom");
    received += r;
  }
  // sendmmsg / recvmmsg: 4 datagrams of 200 bytes in one call each way.
  struct mmsghdr msgs[4];
  struct iovec iov[4];
  memset(msgs, 0, sizeof(msgs));
  for (int i = 0; i < 4; ++i) {
    iov[i].iov_base = buf;
    iov[i].iov_len = 200;
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = &a;
    msgs[i].msg_hdr.msg_namelen = sizeof(a);
  }
  int m = sendmmsg(c, msgs, 4, 0);
  if (m != 4) die("sendmmsg");
  for (int i = 0; i < 4; ++i) sent += msgs[i].msg_len;
  struct mmsghdr in[4];
  struct iovec iniov[4];
  char inbuf[4][256];
  memset(in, 0, sizeof(in));
  for (int i = 0; i < 4; ++i) {
    iniov[i].iov_base = inbuf[i];
    iniov[i].iov_len = sizeof(inbuf[i]);
    in[i].msg_hdr.msg_iov = &iniov[i];
    in[i].msg_hdr.msg_iovlen = 1;
  }
  int got = 0;
  while (got < 4) {
    int k = recvmmsg(s, in + got, (unsigned)(4 - got), 0, NULL);
    if (k <= 0) die("recvmmsg");
    for (int i = 0; i < k; ++i) received += in[got + i].msg_len;
    got += k;
  }
  // A connected UDP client: send/recv (a DNS-like exchange).
  int cc = socket(AF_INET, SOCK_DGRAM, 0);
  if (connect(cc, (struct sockaddr*)&a, sizeof(a)) != 0) die("udp connect");
  struct sockaddr_in ca;
  socklen_t cal = sizeof(ca);
  getsockname(cc, (struct sockaddr*)&ca, &cal);
  if (send(cc, buf, 64, 0) != 64) die("udp send");
  struct sockaddr_in from;
  socklen_t fl = sizeof(from);
  if (recvfrom(s, buf, sizeof(buf), 0, (struct sockaddr*)&from, &fl) != 64) die("udp recvfrom");
  if (sendto(s, buf, 512, 0, (struct sockaddr*)&from, fl) != 512) die("udp reply");
  if (recv(cc, buf, sizeof(buf), 0) != 512) die("udp recv");
  close(cc);
  close(c);
  close(s);
  printf("udp server_port=%d sent=%ld received=%ld connected_out=64 connected_in=512\n", ntohs(a.sin_port), sent,
         received);
  return 0;
}

// ---- connfail ---------------------------------------------------------------

static int cmd_connfail(void) {
  // A port nobody listens on: bind one, note it, close it.
  struct sockaddr_in a;
  int tmp = tcp_listener(&a, 0);
  close(tmp);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  int rc = connect(c, (struct sockaddr*)&a, sizeof(a));
  int err = errno;
  if (rc == 0 || err != ECONNREFUSED) {
    fprintf(stderr, "expected ECONNREFUSED, got rc=%d errno=%d\n", rc, err);
    return 1;
  }
  close(c);
  // Non-blocking: EINPROGRESS, then the error arrives through SO_ERROR.
  int n = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  rc = connect(n, (struct sockaddr*)&a, sizeof(a));
  int err2 = errno;
  struct pollfd p = {.fd = n, .events = POLLOUT};
  poll(&p, 1, 2000);
  int soerr = 0;
  socklen_t sl = sizeof(soerr);
  getsockopt(n, SOL_SOCKET, SO_ERROR, &soerr, &sl);
  close(n);
  printf("connfail port=%d errno=%d nonblocking_rc=%d nonblocking_errno=%d so_error=%d\n", ntohs(a.sin_port), err,
         rc, rc ? err2 : 0, soerr);
  return 0;
}

// ---- dup --------------------------------------------------------------------

static int cmd_dup(void) {
  struct sockaddr_in a;
  int l = tcp_listener(&a, 0);
  int c = tcp_connect(&a);
  int s = accept(l, NULL, NULL);
  char buf[1024];
  memset(buf, 'z', sizeof(buf));
  int d1 = dup(c);
  close(c);                       // the connection lives on through d1
  write_all(d1, buf, 100);
  int d2 = dup2(d1, 50);          // a fixed number
  write_all(d2, buf, 200);
  int d3 = dup3(d1, 51, O_CLOEXEC);
  write_all(d3, buf, 300);
  int d4 = fcntl(d1, F_DUPFD_CLOEXEC, 60);
  write_all(d4, buf, 400);
  read_all(s, buf, 100 + 200 + 300 + 400);
  // A pipe replaces fd 50: from now on writes to 50 are not socket writes.
  int p[2];
  if (pipe(p) != 0) die("pipe");
  if (dup2(p[1], 50) != 50) die("dup2 pipe");
  write_all(50, buf, 33);
  read_all(p[0], buf, 33);
  close(d1);
  close(d3);
  close(d4);                      // the last copy: the connection closes here
  close(50);
  close(p[0]);
  close(p[1]);
  close(s);
  close(l);
  printf("dup fds=%d,%d,%d,%d client_out=1000 pipe_bytes=33\n", d1, d2, d3, d4);
  return 0;
}

// ---- fork -------------------------------------------------------------------

static int cmd_fork(void) {
  struct sockaddr_in a;
  int l = tcp_listener(&a, 0);
  fflush(stdout);
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {  // the worker: serve one connection on the inherited listener
    int s = accept(l, NULL, NULL);
    char buf[256];
    read_all(s, buf, 64);
    write_all(s, buf, 32);
    close(s);
    close(l);
    exit(0);
  }
  int c = tcp_connect(&a);
  char buf[256];
  memset(buf, 'f', sizeof(buf));
  write_all(c, buf, 64);
  read_all(c, buf, 32);
  close(c);
  int status = 0;
  waitpid(child, &status, 0);
  close(l);
  printf("fork child=%d status=%d port=%d\n", (int)child, status, ntohs(a.sin_port));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

// ---- handoff ----------------------------------------------------------------

enum { kAsk = 100, kAnswer = 200 };
// Handed over under a mutex, not a bare atomic: under the sanitizer preload
// runs, ThreadSanitizer sees only intercepted calls in this (uninstrumented)
// program, and would take the fd's use by two threads for a race.
static pthread_mutex_t g_handoff_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_handoff_fd = -1;  // set by the reader, closed by the closer
static int g_handoff_done;

static int handoff_get(int* fd) {
  pthread_mutex_lock(&g_handoff_mu);
  const int done = g_handoff_done;
  *fd = g_handoff_fd;
  pthread_mutex_unlock(&g_handoff_mu);
  return done;
}

static void handoff_set(int fd, int done) {
  pthread_mutex_lock(&g_handoff_mu);
  g_handoff_fd = fd;
  g_handoff_done = done;
  pthread_mutex_unlock(&g_handoff_mu);
}

// Never quiet: a send+recv pair on its own socketpair every 0.5 ms; answers
// and closes each connection the reader hands over.
static void* handoff_closer(void* arg) {
  (void)arg;
  int sv[2];
  char b[kAnswer];
  memset(b, 'a', sizeof b);
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
  for (;;) {
    int fd;
    if (handoff_get(&fd)) break;
    write_all(sv[0], "tick", 4);
    read_all(sv[1], b, 4);
    if (fd >= 0) {
      memset(b, 'a', sizeof b);
      write_all(fd, b, kAnswer);
      close(fd);
      handoff_set(-1, 0);
    }
    usleep(500);
  }
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

static int cmd_handoff(int rounds) {
  struct sockaddr_in addr;
  const int l = tcp_listener(&addr, 0);
  pthread_t closer;
  if (pthread_create(&closer, NULL, handoff_closer, NULL) != 0) die("pthread_create");
  char b[kAnswer];
  memset(b, 'q', sizeof b);
  for (int i = 0; i < rounds; i++) {
    const int c = tcp_connect(&addr);
    const int s = accept(l, NULL, NULL);
    if (s < 0) die("accept");
    write_all(c, b, kAsk);
    usleep(300000);  // quiet: two drains find this thread's ring empty
    read_all(s, b, kAsk);
    handoff_set(s, 0);
    read_all(c, b, kAnswer);
    for (int fd = s; fd >= 0; handoff_get(&fd)) usleep(100);
    close(c);
  }
  handoff_set(-1, 1);
  pthread_join(closer, NULL);
  close(l);
  printf("handoff rounds=%d in=%d out=%d\n", rounds, kAsk, kAnswer);
  return 0;
}

// ---- closeall ---------------------------------------------------------------

static long exchange(const struct sockaddr_in* addr, int listener, size_t n) {
  int c = tcp_connect(addr);
  int s = accept(listener, NULL, NULL);
  if (s < 0) die("accept");
  char buf[4096];
  memset(buf, 'x', sizeof(buf));
  write_all(c, buf, n);
  read_all(s, buf, n);
  write_all(s, buf, n / 2);
  read_all(c, buf, n / 2);
  close(c);
  close(s);
  return (long)n;
}

static int is_pipe(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

static int cmd_closeall(const char* mode) {
  struct sockaddr_in a;
  int l = tcp_listener(&a, 0);
  long first = exchange(&a, l, 1000);
  usleep(200 * 1000);  // let the recorder write a block and open its fds (its threads sleep up to 50 ms)
  enum { kScan = 1024 };  // the recorder's fds sit just under the soft limit (format/own_fds.h)
  char was_pipe[kScan];
  int pipes_before = 0;
  for (int fd = 3; fd < kScan; ++fd) pipes_before += (was_pipe[fd] = (char)is_pipe(fd));
  // A daemon-style "close everything but stdio".
  if (strcmp(mode, "range") == 0) {
    if (close_range(3, ~0U, 0) != 0) die("close_range");
  } else if (strcmp(mode, "from") == 0) {
    closefrom(3);
  } else {
    for (int fd = 3; fd < 1024; ++fd) close(fd);
  }
  int pipes_kept = 0;
  for (int fd = 3; fd < kScan; ++fd) pipes_kept += was_pipe[fd] && is_pipe(fd);
  // Our listener is gone too (that is the point): make a new one and go on.
  l = tcp_listener(&a, 0);
  long second = exchange(&a, l, 2000);
  close(l);
  usleep(50 * 1000);
  printf("closeall mode=%s first=%ld second=%ld port=%d\n", mode, first, second, ntohs(a.sin_port));
  fprintf(stderr, "pipes before=%d kept=%d\n", pipes_before, pipes_kept);
  return 0;
}

// ---- closestorm --------------------------------------------------------------
// A program that closes every descriptor it did not open, over and over (a
// daemon's start, a fork-exec helper), while the recorder reads small files
// (/proc/self/task/N/comm for each of 100 threads, every flush tick). Each
// round closes everything from 3, opens a socket pair, which takes the
// lowest numbers, and sends 16 bytes through it. A recorder file closed
// under its read hands its number to the pair, and the recorder's read and
// close then hit the program's socket: lost bytes, EBADF.

static volatile int g_storm_stop;

// Renamed once the storm is on, with prctl (no library call the recorder
// sees): the trace learns the name only by reading the thread's comm file.
static void* storm_idle(void* arg) {
  usleep(100000);
  char name[16];
  snprintf(name, sizeof(name), "storm-%d", (int)(intptr_t)arg);
  prctl(PR_SET_NAME, name, 0, 0, 0);
  while (!g_storm_stop) usleep(20000);
  return NULL;
}

static int cmd_closestorm(int ms) {
  enum { kThreads = 100 };
  pthread_t th[kThreads];
  for (int i = 0; i < kThreads; ++i) pthread_create(&th[i], NULL, storm_idle, (void*)(intptr_t)i);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long rounds = 0, errors = 0;
  const char* first_error = "none";
  int first_errno = 0;
  static const char kMsg[16] = "0123456789abcdef";
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= ms) break;
    if (rounds & 1) closefrom(3);
    else if (close_range(3, ~0U, 0) != 0) die("close_range");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
    char got[16];
    const char* err = NULL;
    struct pollfd p = {.fd = sv[1], .events = POLLIN};
    if (write(sv[0], kMsg, sizeof(kMsg)) != (ssize_t)sizeof(kMsg)) err = "write";
    else if (poll(&p, 1, 2000) != 1) err = "lost";
    else if (read(sv[1], got, sizeof(got)) != (ssize_t)sizeof(got) || memcmp(got, kMsg, sizeof(got)) != 0) err = "read";
    else if (close(sv[0]) != 0 || close(sv[1]) != 0) err = "close";
    if (err) {
      if (!errors) {
        first_error = err;
        first_errno = errno;
      }
      errors++;
    }
    rounds++;
  }
  g_storm_stop = 1;
  for (int i = 0; i < kThreads; ++i) pthread_join(th[i], NULL);
  printf("closestorm rounds=%ld errors=%ld first_error=%s errno=%s\n", rounds, errors, first_error,
         first_errno ? strerror(first_errno) : "none");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: sock_misc epoll|unix|udp|splice|connfail|dup|fork|handoff|closeall|closestorm ...\n");
    return 2;
  }
  const char* cmd = argv[1];
  if (strcmp(cmd, "epoll") == 0) return cmd_epoll(argc > 2 ? atoi(argv[2]) : 4, argc > 3 ? atoi(argv[3]) : 20);
  if (strcmp(cmd, "unix") == 0) return cmd_unix();
  if (strcmp(cmd, "udp") == 0) return cmd_udp();
  if (strcmp(cmd, "splice") == 0) return cmd_splice();
  if (strcmp(cmd, "connfail") == 0) return cmd_connfail();
  if (strcmp(cmd, "dup") == 0) return cmd_dup();
  if (strcmp(cmd, "fork") == 0) return cmd_fork();
  if (strcmp(cmd, "handoff") == 0) return cmd_handoff(argc > 2 ? atoi(argv[2]) : 4);
  if (strcmp(cmd, "closeall") == 0) return cmd_closeall(argc > 2 ? argv[2] : "range");
  if (strcmp(cmd, "closestorm") == 0) return cmd_closestorm(argc > 2 ? atoi(argv[2]) : 2000);
  fprintf(stderr, "unknown command %s\n", cmd);
  return 2;
}
