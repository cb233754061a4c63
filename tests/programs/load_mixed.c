/* load_mixed THREADS ITERATIONS: every thread does ITERATIONS rounds of
 * malloc(777)+free and a 64-byte send+recv over its own socketpair, as fast
 * as it can. Prints the totals it produced, so a test can check that every
 * operation is either in the trace or counted as dropped. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static long iterations;

static void* worker(void* arg) {
  (void)arg;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
  char buf[64];
  memset(buf, 'x', sizeof(buf));
  for (long i = 0; i < iterations; ++i) {
    char* volatile p = malloc(777);
    p[0] = (char)i;
    free(p);
    if (send(sv[0], buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) abort();
    if (recv(sv[1], buf, sizeof(buf), MSG_WAITALL) != (ssize_t)sizeof(buf)) abort();
  }
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 8;
  iterations = argc > 2 ? atol(argv[2]) : 10000;
  pthread_t* t = calloc((size_t)threads, sizeof(pthread_t));
  for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, worker, NULL);
  for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  printf("mallocs %ld sends %ld recvs %ld\n", threads * iterations, threads * iterations, threads * iterations);
  free(t);
  return 0;
}
