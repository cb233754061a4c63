/* raw_exit: burns SECONDS of its own CPU time in raw_exit_burn(), then ends
 * the process the way Go's runtime does: a raw exit_group system call, so no
 * exit handler, atexit or destructor runs (nothing can seal a trace).
 *   raw_exit SECONDS
 * Prints "burnt" before it exits. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "burn_common.h"

__attribute__((noinline, noipa)) void raw_exit_burn(double s) { BURN_CPU(s, 20000); }

int main(int argc, char** argv) {
  raw_exit_burn(argc > 1 ? atof(argv[1]) : 0.8);
  puts("burnt");
  fflush(stdout);
  syscall(SYS_exit_group, 0);
  return 1; /* not reached */
}
