/* load_mixed THREADS ITERATIONS [MIN_SECONDS]: every thread does ITERATIONS
 * rounds (and goes on until MIN_SECONDS have passed, if given) of
 * malloc(777)+free and a 64-byte send+recv over its own socketpair, as fast
 * as it can. Prints the totals it produced, so a test can check that every
 * operation is either in the trace or counted as dropped. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long iterations;
static double min_seconds;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void* worker(void* arg) {
  long* done = arg;
  const double until = now_s() + min_seconds;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
  char buf[64];
  memset(buf, 'x', sizeof(buf));
  long i = 0;
  for (; i < iterations || (min_seconds > 0 && ((i & 1023) != 0 || now_s() < until)); ++i) {
    char* volatile p = malloc(777);
    p[0] = (char)i;
    free(p);
    if (send(sv[0], buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) abort();
    if (recv(sv[1], buf, sizeof(buf), MSG_WAITALL) != (ssize_t)sizeof(buf)) abort();
  }
  *done = i;
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 8;
  iterations = argc > 2 ? atol(argv[2]) : 10000;
  min_seconds = argc > 3 ? atof(argv[3]) : 0;
  pthread_t* t = calloc((size_t)threads, sizeof(pthread_t));
  long* done = calloc((size_t)threads, sizeof(long));
  for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, worker, &done[i]);
  long total = 0;
  for (int i = 0; i < threads; ++i) {
    pthread_join(t[i], NULL);
    total += done[i];
  }
  printf("mallocs %ld sends %ld recvs %ld\n", total, total, total);
  free(done);
  free(t);
  return 0;
}
