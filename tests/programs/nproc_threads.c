/* nproc_threads: how many threads a program can create under its
 * RLIMIT_NPROC, for tests/integration/test_host_safety_limits.py.
 *
 *   nproc_threads MAX [DELAY_S [LOWER]]
 *                                 waits DELAY_S (default 0.5: the recorder's
 *                                 first tick, which starts its sampler
 *                                 thread, comes sooner), then creates up to
 *                                 MAX threads that all wait until the last
 *                                 one is tried, and exits with how many it
 *                                 created (printed too). With LOWER, it first
 *                                 lowers its soft limit to LOWER and waits
 *                                 (up to 60 s) until it is its only thread
 *                                 (the recorder's threads leave).
 *
 * Run as an unprivileged user (root is exempt from the limit) under
 * `prlimit --nproc=N`: plain, it creates N - 1 (minus the user's other
 * processes and threads); the recorder's threads must not take any. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int go;

static void* waiter(void* arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  while (!go) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return NULL;
}

/* Entries in /proc/self/task: this process's threads. */
static int task_count(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

int main(int argc, char** argv) {
  if (argc < 2) return 200;
  const int max = atoi(argv[1]);
  const double delay = argc >= 3 ? atof(argv[2]) : 0.5;
  if (max < 0 || max > 100) return 201;
  if (argc >= 4) {
    struct rlimit lim;
    if (getrlimit(RLIMIT_NPROC, &lim) != 0) return 202;
    lim.rlim_cur = (rlim_t)strtoul(argv[3], NULL, 10);
    if (setrlimit(RLIMIT_NPROC, &lim) != 0) return 203;
    for (int i = 0; i < 6000 && task_count() > 1; i++) usleep(10000);
  }
  usleep((useconds_t)(delay * 1e6));
  pthread_t t[100];
  int n = 0;
  while (n < max && pthread_create(&t[n], NULL, waiter, NULL) == 0) n++;
  pthread_mutex_lock(&mu);
  go = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  printf("%d\n", n);
  return n;
}
