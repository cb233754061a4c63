/* fault_burn: THREADS threads, all alive at once, each burning SECONDS of its
 * own CPU time in fault_burn_loop() (so a sampler must arm every one of them
 * at the same time), then waiting for the others.
 *   fault_burn THREADS SECONDS [FDS_FILE]
 * Thread i names itself "burn-<i>". While every thread is still alive main
 * counts its perf event descriptors and, with FDS_FILE, writes "perf_fds=N"
 * there (stdout stays identical with and without a recorder).
 * Prints "threads=N". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "burn_common.h"

static double g_seconds;
static pthread_barrier_t g_started, g_burnt, g_counted;

__attribute__((noinline, noipa)) void fault_burn_loop(double s) { BURN_CPU(s, 20000); }

static void* thread_main(void* arg) {
  name_thread("burn", (long)(intptr_t)arg);
  pthread_barrier_wait(&g_started);
  fault_burn_loop(g_seconds);
  pthread_barrier_wait(&g_burnt);
  pthread_barrier_wait(&g_counted);
  return NULL;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 8;
  g_seconds = argc > 2 ? atof(argv[2]) : 0.3;
  const char* fds_file = argc > 3 ? argv[3] : NULL;
  pthread_barrier_init(&g_started, NULL, (unsigned)n + 1);
  pthread_barrier_init(&g_burnt, NULL, (unsigned)n + 1);
  pthread_barrier_init(&g_counted, NULL, (unsigned)n + 1);
  pthread_t* t = calloc((size_t)n, sizeof(pthread_t));
  for (int i = 0; i < n; ++i)
    if (pthread_create(&t[i], NULL, thread_main, (void*)(intptr_t)i) != 0) return 3;
  pthread_barrier_wait(&g_started);
  pthread_barrier_wait(&g_burnt);
  if (fds_file) {
    FILE* f = fopen(fds_file, "w");
    if (f) {
      fprintf(f, "perf_fds=%d\n", count_perf_fds());
      fclose(f);
    }
  }
  pthread_barrier_wait(&g_counted);
  for (int i = 0; i < n; ++i) pthread_join(t[i], NULL);
  free(t);
  printf("threads=%d\n", n);
  return 0;
}
