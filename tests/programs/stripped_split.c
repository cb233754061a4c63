/* stripped_split: a program a profiler meets without symbols, as a
 * distribution's stripped binaries are. Two static functions burn 3 parts
 * and 1 part of the CPU; the test strips a copy of this binary (strip
 * --strip-all keeps .eh_frame, which unwinding needs) and reads the
 * functions' addresses from the unstripped one with nm. Prints each
 * function's CPU time in ns: "alpha_cpu_ns N" and "beta_cpu_ns N". */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>

#include "burn_common.h"

static __attribute__((noinline, noipa)) void stripped_alpha(double s) { BURN_CPU(s, 20000); }
static __attribute__((noinline, noipa)) void stripped_beta(double s) { BURN_CPU(s, 20000); }

int main(void) {
  double alpha = 0, beta = 0;
  /* Interleaved slices, so a shared machine's slow moments hit both alike.
   * Each switch from one to the other can move up to one sample's worth of
   * CPU across it (a SIGPROF timer is checked on the ticks that find the
   * thread running, so on a busy machine a sample may stand for 10 ms or
   * more): slices long against that (ASan, two busy loops beside it: 38 ms
   * of 640 moved with 60/20 ms slices). */
  for (int i = 0; i < 8; ++i) {
    double t = cpu_seconds();
    stripped_alpha(0.12);
    alpha += cpu_seconds() - t;
    t = cpu_seconds();
    stripped_beta(0.04);
    beta += cpu_seconds() - t;
  }
  printf("alpha_cpu_ns %llu\nbeta_cpu_ns %llu\n", (unsigned long long)(alpha * 1e9), (unsigned long long)(beta * 1e9));
  return 0;
}
