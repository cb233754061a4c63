/* fault_fds: uses every file descriptor its RLIMIT_NOFILE allows, works while
 * none is left, then gives them back and works again.
 *   1. opens /dev/null until open() fails with EMFILE (and keeps failing for
 *      five tries 20 ms apart, so a descriptor someone holds for a moment
 *      is taken too); prints "opened N"
 *   2. names every other descriptor above 2 on stdout's sibling, stderr:
 *      "held FD TARGET" (readlink of /proc/self/fd/FD, which needs no fd),
 *      so a test can tell the recorder's descriptors from the program's
 *   3. with no descriptor left: burns CPU in burn_exhausted(), allocates,
 *      and runs a thread named "exhausted" that does the same
 *   4. closes its descriptors, burns CPU in burn_released(), and does a
 *      64-byte round trip over a socketpair; prints "released ok"
 * Both phases burn in the same function, burn(), called (not tail-called) by
 * burn_exhausted() and burn_released(): burn's pcs are first seen with no
 * descriptor left, and a sample's caller frame tells the phases apart.
 * Exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "burn_common.h"

__attribute__((noinline)) static void burn(double s) {
  BURN_CPU(s, 20000);
  for (int i = 0; i < 200; ++i) {
    char* volatile p = malloc(5000);
    p[0] = (char)burn_sink;
    free(p);
  }
}

// The empty asm after the call keeps it a call, not a jump: the wrapper stays on the stack.
__attribute__((noinline, noipa)) void burn_exhausted(double s) {
  burn(s);
  __asm__ volatile("" ::: "memory");
}
__attribute__((noinline, noipa)) void burn_released(double s) {
  burn(s);
  __asm__ volatile("" ::: "memory");
}

static void* exhausted_thread(void* arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "exhausted");
  burn_exhausted(0.2);
  return NULL;
}

int main(void) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  const int limit = (int)rl.rlim_cur;
  int* fds = calloc((size_t)limit + 1, sizeof(int));
  int opened = 0, misses = 0;
  while (misses < 5) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      fds[opened++] = fd;
      misses = 0;
      continue;
    }
    if (errno != EMFILE) {
      perror("open");
      return 2;
    }
    ++misses;
    const struct timespec ms20 = {0, 20000000};
    nanosleep(&ms20, NULL);
  }
  printf("opened %d\n", opened);
  for (int fd = 3; fd < limit; ++fd) {
    char path[64], target[512];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (strcmp(target, "/dev/null") != 0) fprintf(stderr, "held %d %s\n", fd, target);
  }
  burn_exhausted(0.3);
  pthread_t t;
  if (pthread_create(&t, NULL, exhausted_thread, NULL) != 0) return 3;
  pthread_join(t, NULL);
  for (int i = 0; i < opened; ++i) close(fds[i]);
  free(fds);
  burn_released(0.3);
  int sv[2];
  char buf[64] = "ping";
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || send(sv[0], buf, sizeof(buf), 0) != (ssize_t)sizeof(buf) ||
      recv(sv[1], buf, sizeof(buf), MSG_WAITALL) != (ssize_t)sizeof(buf)) {
    printf("released: socketpair failed\n");
    return 4;
  }
  close(sv[0]);
  close(sv[1]);
  printf("released ok\n");
  return 0;
}
