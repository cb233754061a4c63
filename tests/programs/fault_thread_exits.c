/* fault_thread_exits: threads leave in every way POSIX allows, then the main
 * thread itself leaves through pthread_exit, so the process ends when its
 * last thread does (glibc then calls exit(0)).
 *
 * Each worker names itself (ret-N, exit-N, cancel-N, async-N, detach-N,
 * last), allocates a little (so the recorder has a slot for it) and leaves:
 *   ret-N     returns from its start routine
 *   exit-N    calls pthread_exit from a nested function
 *   cancel-N  is cancelled by main while blocked in a cancellation point
 *   async-N   is cancelled asynchronously while spinning in pure arithmetic
 *   detach-N  is detached and calls pthread_exit
 *   last      outlives main: prints "last done" after main has gone
 * usage: fault_thread_exits [N (default 3)] [main_exit (default 1)]
 * With main_exit=0 main joins "last" and returns normally instead. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int g_ready;
static atomic_int g_detached_done;
static pthread_barrier_t g_main_gone;

static void name_self(const char* kind, long i) {
  char name[40];
  if (i < 0) snprintf(name, sizeof(name), "%s", kind);
  else snprintf(name, sizeof(name), "%s-%ld", kind, i);
  name[15] = 0; /* the kernel's limit */
  pthread_setname_np(pthread_self(), name);
}

__attribute__((noinline)) static uint64_t touch_heap(long i) {
  char* volatile p = malloc(1000 + (size_t)i);
  memset(p, (int)i, 1000);
  uint64_t v = (uint64_t)p[7] + 1;
  free(p);
  return v;
}

static void* ret_main(void* arg) {
  long i = (long)(intptr_t)arg;
  name_self("ret", i);
  return (void*)(intptr_t)(touch_heap(i) + 100);
}

/* pthread_exit from a few frames down: the unwinder must cross them. */
__attribute__((noinline)) static void leave_now(long i) { pthread_exit((void*)(intptr_t)(200 + i)); }
__attribute__((noinline)) static void leave_from_inner(long i) { leave_now(i); }
__attribute__((noinline)) static void leave_from_depth(long i) { leave_from_inner(i); }

static void* exit_main(void* arg) {
  long i = (long)(intptr_t)arg;
  name_self("exit", i);
  touch_heap(i);
  leave_from_depth(i);
  return NULL;
}

static void* cancel_main(void* arg) {
  long i = (long)(intptr_t)arg;
  name_self("cancel", i);
  touch_heap(i);
  atomic_fetch_add(&g_ready, 1);
  for (;;) pause(); /* a cancellation point */
  return NULL;
}

static void* async_main(void* arg) {
  long i = (long)(intptr_t)arg;
  name_self("async", i);
  touch_heap(i);
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  atomic_fetch_add(&g_ready, 1);
  volatile uint64_t x = (uint64_t)i;
  for (;;) x = x * 6364136223846793005ull + 1442695040888963407ull; /* no calls: async-cancel safe */
  return NULL;
}

static void* detach_main(void* arg) {
  long i = (long)(intptr_t)arg;
  name_self("detach", i);
  touch_heap(i);
  atomic_fetch_add(&g_detached_done, 1);
  pthread_exit(NULL);
}

static void* last_main(void* arg) {
  (void)arg;
  name_self("last", -1);
  pthread_barrier_wait(&g_main_gone); /* main has printed everything */
  usleep(50 * 1000);
  touch_heap(1);
  printf("last done\n");
  fflush(stdout);
  return NULL;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 3;
  const int main_exit = argc > 2 ? atoi(argv[2]) : 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  pthread_barrier_init(&g_main_gone, NULL, 2);
  pthread_t last;
  pthread_create(&last, NULL, last_main, NULL);

  pthread_t* ret = calloc((size_t)n, sizeof(pthread_t));
  pthread_t* ex = calloc((size_t)n, sizeof(pthread_t));
  pthread_t* can = calloc((size_t)n, sizeof(pthread_t));
  pthread_t* asy = calloc((size_t)n, sizeof(pthread_t));
  for (long i = 0; i < n; ++i) {
    pthread_create(&ret[i], NULL, ret_main, (void*)(intptr_t)i);
    pthread_create(&ex[i], NULL, exit_main, (void*)(intptr_t)i);
    pthread_create(&can[i], NULL, cancel_main, (void*)(intptr_t)i);
    pthread_create(&asy[i], NULL, async_main, (void*)(intptr_t)i);
    pthread_t d;
    pthread_create(&d, NULL, detach_main, (void*)(intptr_t)i);
    pthread_detach(d);
  }
  while (atomic_load(&g_ready) < 2 * n) usleep(1000);
  for (long i = 0; i < n; ++i) {
    pthread_cancel(can[i]);
    pthread_cancel(asy[i]);
  }
  long returned = 0, exited = 0, cancelled = 0;
  for (long i = 0; i < n; ++i) {
    void* v;
    pthread_join(ret[i], &v);
    returned += (intptr_t)v == (intptr_t)(touch_heap(i) + 100);
    pthread_join(ex[i], &v);
    exited += (intptr_t)v == 200 + i;
    pthread_join(can[i], &v);
    cancelled += v == PTHREAD_CANCELED;
    pthread_join(asy[i], &v);
    cancelled += v == PTHREAD_CANCELED;
  }
  while (atomic_load(&g_detached_done) < n) usleep(1000);
  printf("returned %ld exited %ld cancelled %ld detached %d\n", returned, exited, cancelled,
         atomic_load(&g_detached_done));
  free(ret);
  free(ex);
  free(can);
  free(asy);
  if (main_exit) {
    printf("main leaves through pthread_exit\n");
    pthread_barrier_wait(&g_main_gone);
    pthread_exit(NULL); /* the process ends when "last" does */
  }
  pthread_barrier_wait(&g_main_gone);
  pthread_join(last, NULL);
  printf("main returns\n");
  return 0;
}
