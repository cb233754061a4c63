/* A vfork child that crashes (a fault before its exec) must not count as a
 * crash of its parent: the parent goes on, and its own later crash is the one
 * recorded. Prints the child's fate, then faults itself (exit by SIGSEGV). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  pid_t pid = vfork();
  if (pid == 0) {
    volatile int* volatile bad = (int*)16;
    *bad = 1; /* SIGSEGV in the child, sharing the parent's memory */
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  printf("child %s %d\n", WIFSIGNALED(status) ? "signal" : "exit",
         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  fflush(stdout);
  volatile int* volatile bad = (int*)32;
  *bad = 2; /* the parent's own crash */
  return 0;
}
