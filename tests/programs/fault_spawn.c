/* fault_spawn: starts children every way a process can without fork():
 *   vfork+exec    vfork(), then execv() of this program in child mode
 *   vfork+_exit   vfork(), then _exit(7) without exec (the child shares the
 *                 parent's memory, recorder included, until it leaves)
 *   posix_spawn   and posix_spawnp (glibc runs them on clone(CLONE_VM|CLONE_VFORK))
 * The parent waits for each child before the next, so the output order is
 * fixed. A child (argv[1] == "child") allocates in child_alloc(), burns a
 * little CPU and prints "child TAG ok".
 *   fault_spawn [ROUNDS (default 3)] */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

__attribute__((noinline)) static uint64_t child_alloc(int n) {
  uint64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    char* volatile p = malloc(3000 + (size_t)i);
    memset(p, i, 3000);
    sum += (unsigned char)p[17];
    free(p);
  }
  return sum;
}

static int child_main(const char* tag) {
  uint64_t x = child_alloc(200);
  for (int i = 0; i < 2000000; ++i) x = x * 6364136223846793005ull + 1;
  printf("child %s ok%s\n", tag, x == 42 ? "!" : "");
  return 0;
}

static void report(const char* how, pid_t pid) {
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    printf("%s: failed\n", how);
    return;
  }
  printf("%s: exit %d\n", how, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc > 2 && strcmp(argv[1], "child") == 0) return child_main(argv[2]);
  const int rounds = argc > 1 ? atoi(argv[1]) : 3;
  setvbuf(stdout, NULL, _IOLBF, 0);
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return 2;
  self[len] = 0;
  for (int r = 0; r < rounds; ++r) {
    char tag[32];
    child_alloc(50);

    snprintf(tag, sizeof(tag), "vfork-exec-%d", r);
    char* vargs[] = {self, "child", tag, NULL};
    pid_t pid = vfork();
    if (pid == 0) {
      execv(self, vargs);
      _exit(126);
    }
    report(tag, pid);

    pid = vfork();
    if (pid == 0) _exit(7);
    printf("vfork-exit-%d: ", r);
    report("", pid);

    snprintf(tag, sizeof(tag), "posix-spawn-%d", r);
    char* sargs[] = {self, "child", tag, NULL};
    if (posix_spawn(&pid, self, NULL, NULL, sargs, environ) != 0) pid = -1;
    report(tag, pid);

    snprintf(tag, sizeof(tag), "posix-spawnp-%d", r);
    char* pargs[] = {"sh", "-c", "echo from sh; exit 3", NULL};
    if (posix_spawnp(&pid, "sh", NULL, NULL, pargs, environ) != 0) pid = -1;
    report(tag, pid);
  }
  printf("parent done\n");
  return 0;
}
