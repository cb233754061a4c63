/* crash_test MODE: dies the way MODE says, from a named thread, inside a
 * known call chain (crash_worker -> crash_outer -> crash_here), after doing
 * a little recorded work. MODE: segv | abort | fpe | handled (installs its
 * own SIGSEGV handler, which prints and exits 3) | overflow (unbounded
 * recursion in overflow_stack until the thread's stack runs out) | none
 * (exits 0). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* mode;
static volatile int zero = 0;
static int* volatile null_ptr = NULL;

static void on_segv(int sig) {
  (void)sig;
  static const char msg[] = "handled SIGSEGV\n";
  ssize_t w = write(1, msg, sizeof(msg) - 1);
  (void)w;
  _exit(3);
}

/* Each frame keeps a buffer live so the compiler can neither turn the
 * recursion into a loop nor keep the frames small. */
static volatile int keep_going = 1;
__attribute__((noinline)) static int overflow_stack(int depth) {
  volatile char pad[512];
  pad[depth % 512] = (char)depth;
  if (!keep_going) return pad[0];
  return overflow_stack(depth + 1) + pad[(depth * 7) % 512];
}

__attribute__((noinline)) static int crash_here(int depth) {
  if (strcmp(mode, "overflow") == 0) return overflow_stack(depth);
  if (strcmp(mode, "segv") == 0 || strcmp(mode, "handled") == 0) return *null_ptr + depth;
  if (strcmp(mode, "abort") == 0) abort();
  if (strcmp(mode, "fpe") == 0) return depth / zero;
  return depth;
}

__attribute__((noinline)) static int crash_outer(int depth) { return crash_here(depth + 1) + 1; }

static void* crash_worker(void* arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "crasher");
  usleep(50 * 1000);
  int r = crash_outer(1);
  printf("no crash: %d\n", r);
  return NULL;
}

int main(int argc, char** argv) {
  mode = argc > 1 ? argv[1] : "none";
  if (strcmp(mode, "handled") == 0) signal(SIGSEGV, on_segv);
  printf("crash_test %s starting\n", mode);
  fflush(stdout);
  pthread_t t;
  pthread_create(&t, NULL, crash_worker, NULL);
  pthread_join(t, NULL);
  return 0;
}
