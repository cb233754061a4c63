// cpu_fork: the parent burns CPU in parent_burn(), forks, and the child burns
// in child_burn() while the parent keeps burning; both are profiled, each in
// its own trace, and the child holds only its own thread's perf descriptors
// (not the parent's).
//
// prints "child perf_fds=N" (from the child) and "parent done".
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long g_sink;

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define BURN_BODY(seconds)                                      \
  double start = cpu_seconds();                                 \
  unsigned long x = 1;                                          \
  while (cpu_seconds() - start < (seconds))                     \
    for (int i = 0; i < 20000; ++i) x = x * 2862933555777941757ul + 3037000493ul; \
  g_sink = x

__attribute__((noinline, noipa)) void parent_burn(double s) { BURN_BODY(s); }
__attribute__((noinline, noipa)) void child_burn(double s) { BURN_BODY(s); }

static int count_perf_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d))) {
    char path[300], target[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    const ssize_t len = readlink(path, target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = 0;
    if (strstr(target, "perf_event")) n++;
  }
  closedir(d);
  return n;
}

int main(void) {
  parent_burn(0.2);
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    child_burn(0.4);
    printf("child perf_fds=%d\n", count_perf_fds());
    return 0;
  }
  parent_burn(0.2);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 2;
  printf("parent done\n");
  return 0;
}
