// offcpu_burst: many short blocking calls in a tight loop on the main
// thread, for the test of off-CPU samples dropped from a full ring (issue 30):
// their count and time must survive (offcpu.unattributed). Each call is a
// poll with a 1 s timeout on a pipe that already holds data, so the hooks
// time it (a nonzero timeout) although it returns at once; with
// FLIGHTREC_OFFCPU_MIN_US=0 every call becomes a sample or a counted drop.
// Prints the truth as one JSON line: calls made, and the wall time of the
// loop (an upper bound on the time inside them).
//
//   offcpu_burst [calls]   default 100000
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static unsigned long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

__attribute__((noinline)) static int wait_ready(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 1000);
}

__attribute__((noinline)) static long poll_burst(int fd, long calls) {
  long ready = 0;
  for (long i = 0; i < calls; ++i) ready += wait_ready(fd) == 1;
  return ready;
}

int main(int argc, char** argv) {
  const long calls = argc > 1 && atol(argv[1]) > 0 ? atol(argv[1]) : 100000;
  int fds[2];
  if (pipe(fds) != 0 || write(fds[1], "x", 1) != 1) return 2;
  const unsigned long long t0 = now_ns();
  const long ready = poll_burst(fds[0], calls);
  const unsigned long long wall = now_ns() - t0;
  if (ready != calls) return 3;
  printf("{\"calls\": %ld, \"wall_ns\": %llu}\n", calls, wall);
  return 0;
}
