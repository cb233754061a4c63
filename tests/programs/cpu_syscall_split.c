// cpu_syscall_split: half of the CPU time in user code, half in the kernel.
//
//   thread "user-burn": user_burn() spins in a user-space loop;
//   thread "sys-burn":  sys_burn() reads 1 MiB blocks from /dev/zero, so its
//                       time is the kernel clearing pages into the buffer.
// Each stops once its own thread CPU time (user + system) reaches the same
// budget, so a truthful CPU profile splits 50/50 between the two functions.
// A profiler that samples user time only sees user_burn alone.
//
// usage: cpu_syscall_split [cpu_seconds per thread (default 1)]
// Prints "split user=<cpu s> sys=<cpu s> sys_kernel_share=<0..1>".
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double g_budget = 1.0;
static double g_user_cpu, g_sys_cpu, g_sys_kernel_share;
static volatile uint64_t g_sink;

static double thread_cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void user_burn(void) {
  uint64_t x = 1;
  while (thread_cpu_seconds() < g_budget) {
    for (int i = 0; i < 200000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
    g_sink = x;
  }
  g_user_cpu = thread_cpu_seconds();
}

__attribute__((noinline)) static void sys_burn(void) {
  static char buf[1 << 20];
  const int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    perror("open /dev/zero");
    exit(1);
  }
  while (thread_cpu_seconds() < g_budget) {
    if (read(fd, buf, sizeof(buf)) <= 0) {
      perror("read");
      exit(1);
    }
  }
  close(fd);
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  const double user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
  const double sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
  g_sys_cpu = thread_cpu_seconds();
  g_sys_kernel_share = user + sys > 0 ? sys / (user + sys) : 0;
}

static void* user_main(void* arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "user-burn");
  user_burn();
  return NULL;
}

static void* sys_main(void* arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "sys-burn");
  sys_burn();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) g_budget = atof(argv[1]);
  pthread_t a, b;
  if (pthread_create(&a, NULL, user_main, NULL) || pthread_create(&b, NULL, sys_main, NULL)) return 1;
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("split user=%.3f sys=%.3f sys_kernel_share=%.2f\n", g_user_cpu, g_sys_cpu, g_sys_kernel_share);
  return 0;
}
