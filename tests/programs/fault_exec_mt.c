/* fault_exec_mt: exec from a multi-threaded process, again and again.
 *   fault_exec_mt GENERATIONS [THREADS (default 4)]
 * Each generation starts THREADS threads named "gen<G>-<i>" that allocate
 * (in mt_alloc) and send/recv over their own socketpair without pause, plus
 * one blocked in pause(); once each busy thread has done 500 rounds, main
 * prints "generation G" and execs this program with GENERATIONS-1 while the
 * threads are still running (exec ends them wherever they are). Generation 0
 * prints "final" and exits 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int g_gen;
static atomic_int g_warm;

__attribute__((noinline)) static uint64_t mt_alloc(uint64_t i) {
  char* volatile p = malloc(500 + i % 1000);
  p[0] = (char)i;
  const uint64_t v = (unsigned char)p[0];
  free(p);
  return v;
}

static void* busy(void* arg) {
  char name[16];
  snprintf(name, sizeof(name), "gen%d-%ld", g_gen, (long)(intptr_t)arg);
  pthread_setname_np(pthread_self(), name);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
  char buf[32] = {0};
  for (uint64_t i = 0;; ++i) {
    buf[0] = (char)mt_alloc(i);
    if (send(sv[0], buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) abort();
    if (recv(sv[1], buf, sizeof(buf), MSG_WAITALL) != (ssize_t)sizeof(buf)) abort();
    if (i == 500) atomic_fetch_add(&g_warm, 1);
  }
  return NULL;
}

static void* sleeper(void* arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "sleeper");
  for (;;) pause();
  return NULL;
}

int main(int argc, char** argv) {
  g_gen = argc > 1 ? atoi(argv[1]) : 3;
  const int threads = argc > 2 ? atoi(argv[2]) : 4;
  if (g_gen <= 0) {
    printf("final\n");
    return 0;
  }
  pthread_t t;
  for (long i = 0; i < threads; ++i) pthread_create(&t, NULL, busy, (void*)(intptr_t)i);
  pthread_create(&t, NULL, sleeper, NULL);
  while (atomic_load(&g_warm) < threads) usleep(1000);
  printf("generation %d\n", g_gen);
  fflush(stdout);
  char next[16], nthreads[16];
  snprintf(next, sizeof(next), "%d", g_gen - 1);
  snprintf(nthreads, sizeof(nthreads), "%d", threads);
  char* args[] = {argv[0], next, nthreads, NULL};
  execv("/proc/self/exe", args);
  perror("execv");
  return 1;
}
