// sigprof_small_stack: a thread with a PTHREAD_STACK_MIN stack (coroutines
// and small worker pools run this close to the edge) that recurses until
// less than half a signal frame (AT_MINSIGSTKSZ / 2) of its stack is left,
// then computes there. Plain code fits; a signal handler that puts its frame
// on this stack overflows it. Prints "computed deep in a small stack" and exits 0.
//
// usage: sigprof_small_stack
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>

#include "burn_common.h"

static uintptr_t g_stack_lo;  // lowest usable byte of the thread's stack
static uintptr_t g_keep_free; // bytes left below the deepest frame
static int g_frames;

__attribute__((noinline, noipa)) static uint64_t recurse(int n) {
  volatile char frame[256];
  frame[0] = (char)n;
  const uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  if (sp - g_stack_lo < g_keep_free + 2 * sizeof(frame)) {
    g_frames = n;
    BURN_CPU(0.3, 10000);
    return frame[0];
  }
  return recurse(n + 1) + frame[0];
}

static void* run(void* arg) {
  (void)arg;
  pthread_attr_t attr;
  void* lo;
  size_t size;
  if (pthread_getattr_np(pthread_self(), &attr) != 0 || pthread_attr_getstack(&attr, &lo, &size) != 0) exit(2);
  g_stack_lo = (uintptr_t)lo;
  // Bind clock_gettime now: the lazy-binding resolver saves the vector
  // registers on the stack, which is no room the program means to keep.
  (void)cpu_seconds();
  recurse(0);
  return NULL;
}

int main(void) {
  g_keep_free = getauxval(AT_MINSIGSTKSZ) / 2;
  if (g_keep_free < 512) g_keep_free = 512;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN);
  pthread_t t;
  if (pthread_create(&t, &attr, run, NULL) != 0) return 2;
  pthread_join(t, NULL);
  printf("computed %s\n", g_frames > 0 ? "deep in a small stack" : "nowhere");
  return 0;
}
