/* fd_visible: what a program sees in /proc/self/fd while it runs.
 * Lists its descriptors, one "PHASE FD TARGET" line each (readlink of
 * /proc/self/fd/FD), at these points:
 *   start    first thing in main;
 *   threads  after starting 3 threads that allocate at several stack depths
 *            (every allocation is unwound in place under
 *            FLIGHTREC_ALLOC_SAMPLE_BYTES=1, libunwind's address checks
 *            included) and burn CPU (sampled);
 *   joined   after they finished;
 *   idle     after 300 ms asleep (the recorder's threads flush meanwhile);
 *   child    in a child it forks, which allocates and burns CPU first.
 * Exits 0; 1 on a failed call. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "burn_common.h"

static char* volatile sink;

static void list_fds(const char* phase) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) exit(1);
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d)) continue;
    char link[300], target[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
    const ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n < 0) continue;  /* closed meanwhile */
    target[n] = 0;
    printf("%s %s %s\n", phase, e->d_name, target);
  }
  closedir(d);
  fflush(stdout);
}

__attribute__((noinline)) static void allocate_at(int depth, int n) {
  if (depth > 0) {
    char pad[64];
    pad[0] = (char)depth;
    sink = pad;
    allocate_at(depth - 1, n);
    return;
  }
  for (int i = 0; i < n; ++i) {
    char* p = malloc(16 + (size_t)(i % 200));
    p[0] = 1;
    sink = p;
    free(p);
  }
}

__attribute__((noinline)) static void work(void) {
  for (int round = 0; round < 100; ++round) allocate_at(round % 24, 50);
  BURN_CPU(0.15, 1500);
}

static void* worker(void* arg) {
  (void)arg;
  work();
  return NULL;
}

int main(void) {
  list_fds("start");
  pthread_t t[3];
  for (int i = 0; i < 3; ++i)
    if (pthread_create(&t[i], NULL, worker, NULL) != 0) return 1;
  work();
  list_fds("threads");
  for (int i = 0; i < 3; ++i) pthread_join(t[i], NULL);
  list_fds("joined");
  const struct timespec nap = {0, 300 * 1000 * 1000};
  nanosleep(&nap, NULL);
  list_fds("idle");
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    work();
    list_fds("child");
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  return 0;
}
