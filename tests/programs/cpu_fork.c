// cpu_fork: the parent burns CPU in parent_burn(), forks, and the child burns
// in child_burn() while the parent keeps burning; both are profiled, each in
// its own trace, and the child holds only its own thread's perf descriptors
// (not the parent's).
//
// prints "child perf_fds=N" (from the child) and "parent done".
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "burn_common.h"

__attribute__((noinline, noipa)) void parent_burn(double s) { BURN_CPU(s, 20000); }
__attribute__((noinline, noipa)) void child_burn(double s) { BURN_CPU(s, 20000); }

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
