/* load_soak THREADS SECONDS: THREADS threads, each with its own socketpair,
 * doing rounds of malloc(777)+free (in soak_alloc) and a 64-byte send+recv
 * as fast as they can for SECONDS of wall time, then closing the pair.
 * Prints what every thread produced, so a test can check that each of its
 * operations is in the trace or counted as dropped, thread by thread:
 *   thread TID mallocs M sockcalls S    (S = socketpair + sends + recvs + 2 closes)
 *   total mallocs M sockcalls S */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct counts {
  long tid;
  long mallocs;
  long sockcalls;
};

static atomic_int g_stop;

__attribute__((noinline)) static void soak_alloc(long i) {
  char* volatile p = malloc(777);
  p[0] = (char)i;
  free(p);
}

static void* worker(void* arg) {
  struct counts* c = arg;
  c->tid = (long)syscall(SYS_gettid);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
  c->sockcalls = 1;
  char buf[64];
  memset(buf, 'x', sizeof(buf));
  for (long i = 0; !atomic_load_explicit(&g_stop, memory_order_relaxed); ++i) {
    soak_alloc(i);
    c->mallocs++;
    if (send(sv[0], buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) abort();
    if (recv(sv[1], buf, sizeof(buf), MSG_WAITALL) != (ssize_t)sizeof(buf)) abort();
    c->sockcalls += 2;
  }
  close(sv[0]);
  close(sv[1]);
  c->sockcalls += 2;
  return NULL;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 64;
  const double seconds = argc > 2 ? atof(argv[2]) : 60;
  struct counts* c = calloc((size_t)threads, sizeof(*c));
  pthread_t* t = calloc((size_t)threads, sizeof(*t));
  for (int i = 0; i < threads; ++i)
    if (pthread_create(&t[i], NULL, worker, &c[i]) != 0) return 3;
  const struct timespec run = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  nanosleep(&run, NULL);
  atomic_store(&g_stop, 1);
  long mallocs = 0, sockcalls = 0;
  for (int i = 0; i < threads; ++i) {
    pthread_join(t[i], NULL);
    printf("thread %ld mallocs %ld sockcalls %ld\n", c[i].tid, c[i].mallocs, c[i].sockcalls);
    mallocs += c[i].mallocs;
    sockcalls += c[i].sockcalls;
  }
  printf("total mallocs %ld sockcalls %ld\n", mallocs, sockcalls);
  free(c);
  free(t);
  return 0;
}
