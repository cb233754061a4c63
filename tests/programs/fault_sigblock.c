/* fault_sigblock: an application that blocks every signal in every thread
 * (main blocks them first thing, workers inherit the mask and block them
 * again), then works: each of THREADS workers named "blocked-<i>" burns
 * SECONDS of CPU in blocked_burn(), allocates in blocked_alloc() and sends
 * 64-byte messages over a socketpair.
 *   fault_sigblock [THREADS (4)] [SECONDS (0.3)]
 * Prints "threads=N sum=S" (S depends on N only). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "burn_common.h"

static double g_seconds;

__attribute__((noinline, noipa)) void blocked_burn(double s) { BURN_CPU(s, 20000); }

__attribute__((noinline)) uint64_t blocked_alloc(uint64_t i) {
  char* volatile p = malloc(2048 + i % 64);
  memset(p, (int)i, 2048);
  const uint64_t v = (unsigned char)p[100];
  free(p);
  return v;
}

static void* worker(void* arg) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  const long idx = (long)(intptr_t)arg;
  name_thread("blocked", idx);
  blocked_burn(g_seconds);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
  uint64_t sum = 0;
  char buf[64];
  for (uint64_t i = 0; i < 2000; ++i) {
    sum += blocked_alloc(i + (uint64_t)idx);
    memset(buf, (int)i, sizeof(buf));
    if (send(sv[0], buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) abort();
    if (recv(sv[1], buf, sizeof(buf), MSG_WAITALL) != (ssize_t)sizeof(buf)) abort();
    sum += (unsigned char)buf[3];
  }
  close(sv[0]);
  close(sv[1]);
  return (void*)(uintptr_t)sum;
}

int main(int argc, char** argv) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  const int n = argc > 1 ? atoi(argv[1]) : 4;
  g_seconds = argc > 2 ? atof(argv[2]) : 0.3;
  pthread_t* t = calloc((size_t)n, sizeof(pthread_t));
  for (int i = 0; i < n; ++i) pthread_create(&t[i], NULL, worker, (void*)(intptr_t)i);
  uint64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    void* v;
    pthread_join(t[i], &v);
    sum += (uint64_t)(uintptr_t)v;
  }
  free(t);
  printf("threads=%d sum=%llu\n", n, (unsigned long long)sum);
  return 0;
}
