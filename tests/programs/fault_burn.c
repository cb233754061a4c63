/* fault_burn: THREADS threads, all alive at once, each burning SECONDS of its
 * own CPU time in fault_burn_loop() (so a sampler must arm every one of them
 * at the same time), then waiting for the others.
 *   fault_burn THREADS SECONDS [FDS_FILE]
 * Thread i names itself "burn-<i>". While every thread is still alive main
 * counts its perf event descriptors and, with FDS_FILE, writes "perf_fds=N"
 * there (stdout stays identical with and without a recorder).
 * Prints "threads=N". */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double g_seconds;
static pthread_barrier_t g_started, g_burnt, g_counted;
static volatile uint64_t g_sink;

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noinline, noipa)) void fault_burn_loop(double s) {
  const double start = cpu_seconds();
  uint64_t x = 1;
  while (cpu_seconds() - start < s)
    for (int i = 0; i < 20000; ++i) x = x * 2862933555777941757ull + 3037000493ull;
  g_sink = x;
}

static void* thread_main(void* arg) {
  char name[16];
  snprintf(name, sizeof(name), "burn-%ld", (long)(intptr_t)arg);
  pthread_setname_np(pthread_self(), name);
  pthread_barrier_wait(&g_started);
  fault_burn_loop(g_seconds);
  pthread_barrier_wait(&g_burnt);
  pthread_barrier_wait(&g_counted);
  return NULL;
}

static int count_perf_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d))) {
    char path[300], target[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    const ssize_t len = readlink(path, target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = 0;
    if (strstr(target, "perf_event")) n++;
  }
  closedir(d);
  return n;
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
