// offcpu_switch_storm: threads that context-switch tens of thousands of times
// a second next to one that blocks in long, known sleeps.
//
//   "ping", "pong": pingpong_main() passes a byte back and forth over two
//        pipes; each side does ~20 us of user work (pingpong_work) per
//        exchange, then blocks in read until the other answers.
//   "sleeper": sleeper_block() sleeps 2 ms, SLEEPS times.
// Prints "pingpong_cpu=<s> sleep_total=<s> exchanges=<n>": the ping/pong
// threads' CPU time (user + system) and the measured wall time the sleeper
// spent in its sleeps, for the test to compare with the profile.
//
// usage: offcpu_switch_storm [seconds of ping-pong (default 1.5)]
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { SLEEPS = 300 };

static int g_ab[2], g_ba[2];
static double g_seconds = 1.5;
static double g_cpu[2];
static long g_exchanges;
static double g_sleep_total;
static volatile uint64_t g_sink;

static double now_s(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void pingpong_work(void) {
  uint64_t x = g_sink | 1;
  for (int i = 0; i < 20000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  g_sink = x;
}

static void* pingpong_main(void* arg) {
  const int side = (int)(intptr_t)arg;
  pthread_setname_np(pthread_self(), side ? "pong" : "ping");
  const int in = side ? g_ab[0] : g_ba[0], out = side ? g_ba[1] : g_ab[1];
  const double end = now_s(CLOCK_MONOTONIC) + g_seconds;
  char c = 0;
  long n = 0;
  if (side == 0 && write(out, &c, 1) != 1) exit(1);
  for (;;) {
    const ssize_t r = read(in, &c, 1);
    if (r != 1) break;  // the other side closed: done
    if (c == 'q') break;
    pingpong_work();
    ++n;
    if (side == 0 && now_s(CLOCK_MONOTONIC) >= end) c = 'q';
    if (write(out, &c, 1) != 1) break;
    if (c == 'q') break;
  }
  g_cpu[side] = now_s(CLOCK_THREAD_CPUTIME_ID);
  if (side == 0) g_exchanges = n;
  return NULL;
}

__attribute__((noinline)) static void sleeper_block(void) {
  const struct timespec ts = {0, 2000000};
  const double t0 = now_s(CLOCK_MONOTONIC);
  nanosleep(&ts, NULL);
  g_sleep_total += now_s(CLOCK_MONOTONIC) - t0;
}

static void* sleeper_main(void* arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "sleeper");
  for (int i = 0; i < SLEEPS; ++i) sleeper_block();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) g_seconds = atof(argv[1]);
  if (pipe(g_ab) || pipe(g_ba)) return 1;
  pthread_t a, b, s;
  if (pthread_create(&a, NULL, pingpong_main, (void*)0) || pthread_create(&b, NULL, pingpong_main, (void*)1) ||
      pthread_create(&s, NULL, sleeper_main, NULL))
    return 1;
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  pthread_join(s, NULL);
  printf("pingpong_cpu=%.3f sleep_total=%.3f exchanges=%ld\n", g_cpu[0] + g_cpu[1], g_sleep_total, g_exchanges);
  return 0;
}
