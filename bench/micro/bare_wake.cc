// bare_wake: what one futex sleep-and-wake costs a thread that does nothing
// else, in CPU time charged to it: the floor under every flush-thread wake-up
// on this machine (on the 2-vCPU VM this was about 64 us, most of a tick's
// cost when a tick has little to do).
//   bare_wake [PERIOD_MS]   sleeps PERIOD_MS (5) at a time for about 4 s
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const long ms = argc > 1 ? atol(argv[1]) : 5;
  if (ms <= 0 || ms > 1000) return 2;
  uint32_t word = 0;
  const timespec period = {ms / 1000, (ms % 1000) * 1000000};
  timespec c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  const long n = 4000 / ms;
  for (long i = 0; i < n; i++) syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &period, nullptr, 0);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  const double ns = (c1.tv_sec - c0.tv_sec) * 1e9 + (c1.tv_nsec - c0.tv_nsec);
  printf("bare futex wake every %ld ms: %.1f us of the thread's CPU per wake (%ld wakes)\n", ms, ns / n / 1000, n);
  return 0;
}
