/* pthread_cancel must reach a thread blocked in read() on a pipe whose fd
 * number last belonged to a non-blocking socket that libc closed internally
 * (fclose(fdopen(fd)): past any close() interposer). A recorder that trusted
 * its stale "non-blocking socket" entry made a raw read system call there,
 * which is no cancellation point: the cancel never took effect.
 * Prints "cancelled" and exits 0, or "not cancelled" and exits 1. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int g_fd;

static void* Reader(void* arg) {
  (void)arg;
  char buf[16];
  for (;;) {
    ssize_t n = read(g_fd, buf, sizeof(buf));
    if (n <= 0) break;
  }
  return NULL;
}

int main(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 2;
  char c = 'x';
  if (write(sv[1], &c, 1) != 1) return 2;  /* a recorded data call on the socket */
  if (read(sv[0], &c, 1) != 1) return 2;
  int num = sv[0];
  FILE* f = fdopen(sv[0], "r");
  fclose(f);  /* closes sv[0] inside libc */
  int p[2];
  if (pipe(p) != 0) return 2;
  g_fd = p[0];
  if (g_fd != num) { /* the pipe must take the socket's number */
    dup2(p[0], num);
    close(p[0]);
    g_fd = num;
  }
  pthread_t t;
  pthread_create(&t, NULL, Reader, NULL);
  usleep(100 * 1000);
  pthread_cancel(t);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 3;
  void* res = NULL;
  if (pthread_timedjoin_np(t, &res, &deadline) != 0 || res != PTHREAD_CANCELED) {
    puts("not cancelled");
    return 1;
  }
  puts("cancelled");
  return 0;
}
