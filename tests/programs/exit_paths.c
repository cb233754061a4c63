/* exit_paths: ways a program leaves that the recorder must not change
 * (issue 38: the recorder does nothing heavy on the program's threads).
 *
 *   alarm_exit      the main thread allocates and frees without pause; a
 *                   SIGALRM handler calls _exit(3), often while malloc holds
 *                   its arena lock. Exits 3.
 *   raw_exit N      the main thread leaves through the exit system call
 *                   (no atexit, no destructors) while a worker thread still
 *                   burns CPU for a moment and then leaves the same way.
 *                   Exits N.
 *   raw_exit_alone N  the only thread leaves through the exit system call.
 *   small_stack_exit N  a thread with a 16 KiB stack calls exit(N) as soon
 *                   as it starts. Exits N.
 *   many_exit       8 threads call exit(0) at once. Exits 0.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void burn(unsigned long n) {
  unsigned long x = 1;
  for (unsigned long i = 0; i < n; ++i) x = x * 6364136223846793005ul + i;
  sink = x;
}

static void on_alarm(int sig) {
  (void)sig;
  _exit(3);
}

__attribute__((noreturn)) static int alarm_exit(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  /* Long enough for the recorder to be up and writing, short enough that
   * the handler lands inside malloc or free most of the time. */
  struct itimerval it = {{0, 0}, {0, 150000}};
  setitimer(ITIMER_REAL, &it, NULL);
  void* keep[64] = {0};
  for (unsigned long i = 0;; ++i) {
    unsigned slot = (unsigned)(i * 2654435761u) % 64;
    free(keep[slot]);
    keep[slot] = malloc(16 + (i % 4000));
  }
}

static int g_status;

static void* raw_worker(void* arg) {
  (void)arg;
  burn(20000000);
  syscall(SYS_exit, g_status);
  return NULL;
}

__attribute__((noreturn)) static void* exit_at_once(void* arg) {
  exit((int)(long)arg);
}

static pthread_barrier_t g_barrier;

__attribute__((noreturn)) static void* exit_together(void* arg) {
  (void)arg;
  pthread_barrier_wait(&g_barrier);
  exit(0);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  int n = argc > 2 ? atoi(argv[2]) : 0;
  burn(5000000);  /* the recorder has something to write */
  if (!strcmp(mode, "alarm_exit")) return alarm_exit();
  if (!strcmp(mode, "raw_exit") || !strcmp(mode, "raw_exit_alone")) {
    g_status = n;
    if (!strcmp(mode, "raw_exit")) {
      pthread_t t;
      pthread_create(&t, NULL, raw_worker, NULL);
    }
    syscall(SYS_exit, n);
  }
  if (!strcmp(mode, "small_stack_exit")) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 16384);
    pthread_t t;
    if (pthread_create(&t, &attr, exit_at_once, (void*)(long)n) != 0) return 100;
    pthread_join(t, NULL);
    return 101;
  }
  if (!strcmp(mode, "many_exit")) {
    enum { kThreads = 8 };
    pthread_barrier_init(&g_barrier, NULL, kThreads);
    pthread_t t[kThreads];
    for (int i = 0; i < kThreads; ++i) pthread_create(&t[i], NULL, exit_together, NULL);
    for (int i = 0; i < kThreads; ++i) pthread_join(t[i], NULL);
    return 102;
  }
  fprintf(stderr, "usage: exit_paths alarm_exit|raw_exit N|raw_exit_alone N|small_stack_exit N|many_exit\n");
  return 2;
}
