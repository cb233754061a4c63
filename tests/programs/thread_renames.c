/* thread_renames: threads renamed behind pthread_setname_np's back, which
 * only the recorder's periodic look at /proc/self/task/<tid>/comm can see:
 *   thread_renames SLEEPERS KILL
 * "busy" renames itself with prctl(PR_SET_NAME, "prctl-busy") and keeps
 * making socket calls; "sleeper" renames itself "prctl-sleeper" and sleeps;
 * main renames SLEEPERS other sleeping threads by writing their comm files
 * ("renamed-<i>"). After 2.5 s main exits; with KILL=1 it prints
 * "renamed", waits for a line on stdin (the test sends one once the trace on
 * disk names the busy thread: no wall-clock guess on a busy machine), then
 * sends itself SIGKILL (no exit code runs: only what was written while it
 * lived counts). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static pid_t tids[256];
static volatile int started;

static void* Busy(void* arg) {
  (void)arg;
  prctl(PR_SET_NAME, "prctl-busy", 0, 0, 0);
  int sv[2];
  char b[16];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) exit(1);
  for (;;) {
    if (send(sv[0], "ping", 4, 0) != 4 || recv(sv[1], b, sizeof b, 0) != 4) exit(1);
    usleep(10000);
  }
  return NULL;
}

static void* Sleeper(void* arg) {
  (void)arg;
  prctl(PR_SET_NAME, "prctl-sleeper", 0, 0, 0);
  pause();
  return NULL;
}

static void* Other(void* arg) {
  tids[(long)arg] = (pid_t)syscall(SYS_gettid);
  __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
  pause();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const int n = atoi(argv[1]);
  const int kill_self = atoi(argv[2]);
  if (n < 0 || n > 256) return 2;
  pthread_t t;
  for (long i = 0; i < n; i++) pthread_create(&t, NULL, Other, (void*)i);
  while (__atomic_load_n(&started, __ATOMIC_SEQ_CST) < n) usleep(1000);
  usleep(1300000);  /* past the recorder's first look at the new threads (once a second) */
  pthread_create(&t, NULL, Busy, NULL);
  pthread_create(&t, NULL, Sleeper, NULL);
  for (int i = 0; i < n; i++) {
    char path[64], name[16];
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", tids[i]);
    snprintf(name, sizeof name, "renamed-%d", i);
    FILE* f = fopen(path, "w");
    if (!f || fputs(name, f) < 0 || fclose(f) != 0) return 1;
  }
  if (kill_self) {
    char line[16];
    printf("renamed\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
  } else {
    usleep(2500000);
  }
  printf("done\n");
  fflush(stdout);
  if (kill_self) kill(getpid(), SIGKILL);
  exit(0);
}
