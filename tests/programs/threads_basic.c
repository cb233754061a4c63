/* threads_basic: starts named threads that each do a little work and exit,
 * optionally forks a child that does the same, then exits. Used by the
 * runtime's integration tests:
 *   threads_basic [nthreads] [fork] [sleep_ms] [hold] [alloc_kib]
 * Thread i is named "tb-worker-<i>" (set from inside the thread). With hold=1
 * all threads stay alive until every one has started; main then prints its
 * VmRSS ("rss_kb N") so tests can bound the recorder's memory per thread.
 * alloc_kib: each thread first mallocs and frees that many KiB, 1 KiB at a
 * time (a pool of threads that allocate, and so take allocation samples). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile uint64_t sink;
static pthread_barrier_t hold_barrier;
static int hold;
static int alloc_kib;

static long rss_kb(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
  if (f) fclose(f);
  return kb;
}

static void* worker(void* arg) {
  char name[16];
  snprintf(name, sizeof(name), "tb-worker-%ld", (long)(intptr_t)arg);
  pthread_setname_np(pthread_self(), name);
  uint64_t h = (uint64_t)(intptr_t)arg;
  for (int i = 0; i < 100000; ++i) h = h * 6364136223846793005ull + 1442695040888963407ull;
  sink += h;
  for (int i = 0; i < alloc_kib; ++i) {
    char* volatile block = malloc(1024); /* volatile: the pair is not optimised away */
    block[0] = (char)i;
    free(block);
  }
  if (hold) {
    pthread_barrier_wait(&hold_barrier); /* all started */
    pthread_barrier_wait(&hold_barrier); /* main measured */
  }
  return NULL;
}

static void run_threads(int n) {
  pthread_t* t = calloc((size_t)n, sizeof(pthread_t));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  if (hold) pthread_barrier_init(&hold_barrier, NULL, (unsigned)n + 1);
  for (int i = 0; i < n; ++i)
    if (pthread_create(&t[i], &attr, worker, (void*)(intptr_t)i) != 0) {
      fprintf(stderr, "pthread_create failed at %d\n", i);
      exit(2);
    }
  if (hold) {
    pthread_barrier_wait(&hold_barrier);
    usleep(100 * 1000); /* let the recorder register and drain every thread */
    printf("rss_kb %ld\n", rss_kb());
    pthread_barrier_wait(&hold_barrier);
  }
  for (int i = 0; i < n; ++i) pthread_join(t[i], NULL);
  pthread_attr_destroy(&attr);
  free(t);
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  int do_fork = argc > 2 ? atoi(argv[2]) : 0;
  int sleep_ms = argc > 3 ? atoi(argv[3]) : 0;
  hold = argc > 4 ? atoi(argv[4]) : 0;
  alloc_kib = argc > 5 ? atoi(argv[5]) : 0;
  run_threads(n);
  hold = 0;
  if (do_fork) {
    pid_t pid = fork();
    if (pid == 0) {
      run_threads(2);
      printf("child %d done\n", (int)getpid());
      fflush(stdout);
      _exit(0);  /* plain _exit: the child's segments must still decode */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("child exit %d\n", WEXITSTATUS(status));
  }
  if (sleep_ms > 0) usleep((useconds_t)sleep_ms * 1000);
  printf("threads_basic: %d threads done\n", n);
  return 0;
}
