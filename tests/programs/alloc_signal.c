/* alloc_signal: allocates from a signal handler while the interrupted thread
 * is itself allocating. malloc is not async-signal-safe, so the program keeps
 * glibc out of trouble the way real programs that do this get away with it:
 * the main loop only recycles one tcache-sized block (no arena lock after
 * warm-up), the handler uses other size classes. What remains is our hook
 * being re-entered at any point: mid-countdown, mid-stack-capture, mid-ring
 * push. The handler's allocations come from on_signal (its stack must unwind
 * through the signal frame).
 *
 *   alloc_signal [iterations=300000]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static volatile sig_atomic_t g_handled;
static void* volatile g_sink;

__attribute__((noinline)) static void on_signal(int sig) {
  (void)sig;
  void* p = malloc(5000);
  if (p) memset(p, 0x5A, 64);
  g_sink = p;
  free(p);
  void* q = calloc(3, 700);
  g_sink = q;
  free(q);
  g_handled++;
}

__attribute__((noinline)) static unsigned long main_loop(long iterations) {
  unsigned long sum = 0;
  for (long i = 0; i < iterations; ++i) {
    unsigned char* p = malloc(40);
    if (!p) abort();
    p[0] = (unsigned char)i;
    p[39] = (unsigned char)(i >> 8);
    sum += p[0] + p[39];
    g_sink = p;
    free(p);
  }
  return sum;
}

int main(int argc, char** argv) {
  long iterations = argc > 1 ? atol(argv[1]) : 300000;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);

  unsigned long expected = main_loop(1000);  /* warm-up: tcache holds our block */
  expected = 0;
  for (long i = 0; i < iterations; ++i) expected += (unsigned char)i + (unsigned char)(i >> 8);

  struct itimerval it;
  memset(&it, 0, sizeof(it));
  it.it_interval.tv_usec = 200;
  it.it_value.tv_usec = 200;
  setitimer(ITIMER_REAL, &it, NULL);
  unsigned long sum = main_loop(iterations);
  /* Keep running until signals have certainly arrived, however slow the machine. */
  while (g_handled < 20) sum += main_loop(1000) * 0;
  memset(&it, 0, sizeof(it));
  setitimer(ITIMER_REAL, &it, NULL);

  printf("sum %s handled %s\n", sum == expected ? "ok" : "BAD", g_handled > 0 ? "yes" : "no");
  return sum == expected ? 0 : 1;
}
