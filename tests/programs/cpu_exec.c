// cpu_exec: burns CPU, then execs itself, N times; the last image burns in
// burn_final() and exits 0. Every exec happens right after a CPU burn, so a
// SIGPROF of the sampler pending at exec would kill the new image (its
// SIGPROF disposition is the default) -- the process must survive them all.
//
// usage: cpu_exec [remaining (default 10)]   prints "final after N execs"
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "burn_common.h"

__attribute__((noinline, noipa)) void burn_before_exec(double s) { BURN_CPU(s, 20000); }
__attribute__((noinline, noipa)) void burn_final(double s) { BURN_CPU(s, 20000); }

int main(int argc, char** argv) {
  const int remaining = argc > 1 ? atoi(argv[1]) : 10;
  const int done = argc > 2 ? atoi(argv[2]) : 0;
  if (remaining <= 0) {
    burn_final(0.5);
    printf("final after %d execs\n", done);
    return 0;
  }
  burn_before_exec(0.03);
  char next[16], count[16];
  snprintf(next, sizeof(next), "%d", remaining - 1);
  snprintf(count, sizeof(count), "%d", done + 1);
  char* args[] = {argv[0], next, count, NULL};
  execv("/proc/self/exe", args);
  perror("execv");
  return 1;
}
