// s3_worker: a small host for the S3 upload integration tests.
//
//   s3_worker <milliseconds> [threads]
//
// Runs `threads` workers (default 2) that allocate, touch and free memory
// with short sleeps until `milliseconds` have passed, so the recorder has
// events to write and segments to seal; then prints "worker done" and
// returns from main (a normal exit, which runs the upload shutdown hook).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long g_until_ns;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void* work(void* arg) {
  unsigned seed = (unsigned)(size_t)arg;
  unsigned long checksum = 0;
  while (now_ns() < g_until_ns) {
    size_t n = 1024 + (rand_r(&seed) % 65536);
    char* p = malloc(n);
    if (p) {
      memset(p, (int)n, n);
      checksum += (unsigned char)p[n / 2];
      free(p);
    }
    struct timespec pause = {0, 2 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  return (void*)checksum;
}

int main(int argc, char** argv) {
  long ms = argc > 1 ? atol(argv[1]) : 100;
  int threads = argc > 2 ? atoi(argv[2]) : 2;
  if (threads < 1 || threads > 64) threads = 2;
  g_until_ns = now_ns() + ms * 1000000LL;
  pthread_t t[64];
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, work, (void*)(size_t)(i + 1));
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  printf("worker done\n");
  return 0;
}
