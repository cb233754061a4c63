/* fsize_work: a program that works (allocates and burns CPU on two threads)
 * under a file-size limit (RLIMIT_FSIZE, `ulimit -f`) it never writes past
 * itself, for tests/integration/test_host_safety_limits.py.
 *
 *   fsize_work SECONDS                work SECONDS, print "done", exit 0
 *   fsize_work SECONDS LIMIT          the same, then lower the soft limit to
 *                                     LIMIT bytes and exit at once (the
 *                                     recorder's last write comes after)
 *   fsize_work SECONDS LIMIT AFTER    lower it after SECONDS, work AFTER more
 *                                     seconds, then exit
 *
 * Plain, it exits 0 whatever the limit: it writes only to stdout (a pipe in
 * the tests). SIGXFSZ keeps its default action (terminate with a core), so
 * a write of the recorder's that raised it would end the program with 153. */
#define _GNU_SOURCE
#include "burn_common.h"

#include <sys/resource.h>

static volatile int stop;

static void* worker(void* arg) {
  (void)arg;
  while (!stop) {
    for (int i = 0; i < 64; i++) {
      char* p = malloc(512 + (size_t)i * 64);
      if (p) p[0] = (char)i;
      free(p);
    }
    BURN_CPU(0.002, 1000);
  }
  return NULL;
}

static void work(double seconds) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  pthread_t t[2];
  stop = 0;
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
  do {
    usleep(10000);
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) * 1e-9 < seconds);
  stop = 1;
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  work(atof(argv[1]));
  if (argc >= 3) {
    struct rlimit lim;
    if (getrlimit(RLIMIT_FSIZE, &lim) != 0) return 3;
    lim.rlim_cur = (rlim_t)strtoull(argv[2], NULL, 10);
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 4;
    if (argc >= 4) work(atof(argv[3]));
  }
  printf("done\n");
  return 0;
}
