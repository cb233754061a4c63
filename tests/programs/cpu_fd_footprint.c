/* cpu_fd_footprint: burns CPU in burn_here(), waits while the recorder
 * symbolizes the samples, then names every descriptor it has open, one
 * "fd FD TARGET" line each (readlink of /proc/self/fd/FD). A test compares
 * the list with the files the trace names: the recorder's symbolizer must
 * not hold the program's own binary or libraries open.
 *   cpu_fd_footprint [SECONDS_TO_WAIT]   (default 0.6)
 * Exits 0. */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "burn_common.h"

__attribute__((noinline)) static void burn_here(void) { BURN_CPU(0.4, 4000); }

int main(int argc, char** argv) {
  const double wait_s = argc > 1 ? atof(argv[1]) : 0.6;
  burn_here();
  usleep((useconds_t)(wait_s * 1e6));
  DIR* d = opendir("/proc/self/fd");
  if (!d) return 1;
  const int own = dirfd(d);
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == own) continue;
    char link[300], target[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
    const ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n < 0) continue;
    target[n] = 0;
    printf("fd %s %s\n", e->d_name, target);
  }
  closedir(d);
  return 0;
}
