/* burn_common.h: what the CPU-burning test programs share: a thread's CPU
 * clock, the spin loop, thread naming and a count of perf descriptors.
 * Include it after `#define _GNU_SOURCE`, with quotes (the Makefile lists it
 * as a prerequisite of every program). */
#ifndef FLIGHTREC_TESTS_PROGRAMS_BURN_COMMON_H
#define FLIGHTREC_TESTS_PROGRAMS_BURN_COMMON_H

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Where BURN_CPU leaves its result, so the loop cannot be optimised away. */
static volatile uint64_t burn_sink __attribute__((unused));

/* This thread's CPU time in seconds. */
static inline double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Spins for SECONDS of this thread's CPU time, INNER multiply-adds between
 * clock reads. A macro, not a function: the tests name the sampled leaf
 * frame, so the loop must sit in the caller's own (noinline) function; an
 * inlined helper would show up as a frame of its own. */
#define BURN_CPU(seconds, inner)                                          \
  do {                                                                    \
    const double burn_start_ = cpu_seconds();                             \
    uint64_t burn_x_ = 1;                                                 \
    while (cpu_seconds() - burn_start_ < (seconds))                       \
      for (int burn_i_ = 0; burn_i_ < (inner); ++burn_i_)                 \
        burn_x_ = burn_x_ * 2862933555777941757ull + 3037000493ull;       \
    burn_sink = burn_x_;                                                  \
  } while (0)

/* Names the calling thread "PREFIX-I" (cut to the kernel's 15 characters). */
static inline void name_thread(const char* prefix, long i) {
  char name[16];
  snprintf(name, sizeof(name), "%s-%ld", prefix, i);
  pthread_setname_np(pthread_self(), name);
}

/* How many of this process's descriptors are perf events
 * ("anon_inode:[perf_event]"); -1 if /proc/self/fd cannot be read. */
static inline int count_perf_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d))) {
    char path[300], target[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    const ssize_t len = readlink(path, target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = 0;
    if (strstr(target, "perf_event")) n++;
  }
  closedir(d);
  return n;
}

/* Prints every open descriptor as "fd N TARGET" (readlink of
 * /proc/self/fd/N), leaving out the directory stream's own. */
static inline void print_open_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d)) continue;
    char link[300], target[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
    const ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n < 0) continue;
    target[n] = 0;
    printf("fd %s %s\n", e->d_name, target);
  }
  closedir(d);
}

#endif
