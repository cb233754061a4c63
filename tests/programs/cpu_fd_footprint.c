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
  print_open_fds();
  return 0;
}
