/* fork_dlopen: forks many times while other threads run code spread over
 * many distinct functions (so a profiler unwinding their stacks keeps
 * meeting new pcs and looking up their unwind tables, dl_iterate_phdr); each
 * child walks the loaded objects with dl_iterate_phdr and dlopen()s a
 * library not yet loaded (both take the dynamic loader's locks) and exits.
 *   fork_dlopen [FORKS]   (default 400)
 * Prints "forks N ok" and exits 0 when every child exited 0; a child still
 * running 20 s after its fork is reported ("child N hung"), killed, and the
 * program exits 1. The burning threads never enter the dynamic loader
 * themselves, so without a profiler no child can inherit a loader lock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static volatile unsigned long sink;

/* 256 distinct functions, each with its own loop (its own pcs). */
#define F(n)                                                             \
  __attribute__((noinline)) static unsigned long f##n(unsigned long x) { \
    for (int i = 0; i < 200; ++i) x = x * (2 * (n) + 3) + (n);           \
    return x;                                                            \
  }
#define F4(n) F(n##0) F(n##1) F(n##2) F(n##3)
#define F16(n) F4(n##0) F4(n##1) F4(n##2) F4(n##3)
#define F64(n) F16(n##0) F16(n##1) F16(n##2) F16(n##3)
F64(1) F64(2) F64(3) F64(4)
#define R(n) f##n,
#define R4(n) R(n##0) R(n##1) R(n##2) R(n##3)
#define R16(n) R4(n##0) R4(n##1) R4(n##2) R4(n##3)
#define R64(n) R16(n##0) R16(n##1) R16(n##2) R16(n##3)
static unsigned long (*const table[])(unsigned long) = {R64(1) R64(2) R64(3) R64(4)};
enum { kFunctions = sizeof(table) / sizeof(table[0]) };

static void* burner(void* arg) {
  unsigned long x = (unsigned long)arg;
  unsigned i = (unsigned)x;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) x = table[i++ % kFunctions](x);
  sink = x;
  return NULL;
}

static int count_object(struct dl_phdr_info* info, size_t size, void* data) {
  (void)info;
  (void)size;
  ++*(int*)data;
  return 0;
}

int main(int argc, char** argv) {
  const int forks = argc > 1 ? atoi(argv[1]) : 400;
  pthread_t t[3];
  for (int i = 0; i < 3; ++i)
    if (pthread_create(&t[i], NULL, burner, (void*)(unsigned long)(i * 85 + 1)) != 0) return 1;
  int status = 0;
  for (int n = 0; n < forks && status == 0; ++n) {
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      int objects = 0;
      dl_iterate_phdr(count_object, &objects);
      void* h = dlopen("libresolv.so.2", RTLD_NOW);
      _exit(objects > 0 && h != NULL ? 0 : 2);
    }
    int st = 0;
    for (int waited_ms = 0;; waited_ms += 1) {
      const pid_t got = waitpid(pid, &st, WNOHANG);
      if (got == pid) break;
      if (waited_ms >= 20000) {
        printf("child %d hung\n", n);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        status = 1;
        break;
      }
      const struct timespec ms = {0, 1000 * 1000};
      nanosleep(&ms, NULL);
    }
    if (status == 0 && (!WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
      printf("child %d ended with status %d\n", n, st);
      status = 1;
    }
    if (status == 0 && n + 1 == forks) printf("forks %d ok\n", forks);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; ++i) pthread_join(t[i], NULL);
  return status;
}
