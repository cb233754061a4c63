// cpu_threads: 500 threads started and stopped in batches, each burning a
// little CPU in thread_burn(), so the sampler arms and disarms every one.
// Afterwards the sampler's per-thread perf descriptors must go away with
// their threads: the sampler reclaims them on its own (low-priority) thread,
// so the program waits up to 10 s for the count of perf descriptors to drop
// to the main thread's two before it reports what it sees.
//
// usage: cpu_threads [threads (default 500)] [batch (default 50)]
// prints "threads=N perf_fds=M"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "burn_common.h"

__attribute__((noinline, noipa)) void thread_burn(double s) { BURN_CPU(s, 20000); }

static void* thread_main(void* arg) {
  (void)arg;
  thread_burn(0.006);
  return NULL;
}

int main(int argc, char** argv) {
  const int total = argc > 1 ? atoi(argv[1]) : 500;
  const int batch = argc > 2 ? atoi(argv[2]) : 50;
  pthread_t* t = calloc((size_t)batch, sizeof(pthread_t));
  if (!t) return 2;
  int started = 0;
  while (started < total) {
    int n = total - started < batch ? total - started : batch;
    for (int i = 0; i < n; ++i)
      if (pthread_create(&t[i], NULL, thread_main, NULL) != 0) return 3;
    for (int i = 0; i < n; ++i) pthread_join(t[i], NULL);
    started += n;
  }
  free(t);
  int fds = count_perf_fds();
  for (int i = 0; i < 1000 && fds > 2; ++i) {
    const struct timespec ms10 = {0, 10000000};
    nanosleep(&ms10, NULL);
    fds = count_perf_fds();
  }
  printf("threads=%d perf_fds=%d\n", started, fds);
  return 0;
}
