/* cpu_phases: CPU in two known phases, for the diff tests: first
 * phase_one() burns ONE seconds of CPU, then phase_two() burns TWO seconds,
 * both on the main thread. Two runs with different splits, or the two
 * halves of one run, differ in a known way: phase_two grows, phase_one
 * shrinks.
 *
 * usage: cpu_phases [ONE (default 0.5)] [TWO (default 0.5)] */
#define _GNU_SOURCE
#include "burn_common.h"

__attribute__((noinline, noipa)) void phase_one(double s) { BURN_CPU(s, 20000); }
__attribute__((noinline, noipa)) void phase_two(double s) { BURN_CPU(s, 20000); }

int main(int argc, char** argv) {
  const double one = argc > 1 ? atof(argv[1]) : 0.5;
  const double two = argc > 2 ? atof(argv[2]) : 0.5;
  if (one > 0) phase_one(one);
  if (two > 0) phase_two(two);
  printf("cpu_phases: %.2f s in phase_one, %.2f s in phase_two\n", one, two);
  return 0;
}
