// priv_drop MODE ROUNDS [LINGER_S]: started as root, forks a child that
// switches user the way nginx switches its workers (setgroups, setgid,
// setuid) and works on both sides of the switch. MODE "drop" switches to uid/gid 65534 (nobody);
// "stay" calls setuid(0) (root to root: nothing changes). MODE "self" does
// the child's work, switching to nobody, in the process itself (no fork: a
// single-process daemon; its recorder threads already run when it switches).
//
// The child makes a socketpair, sends ROUNDS/2 messages of MSG bytes from
// one end to the other, switches, sends ROUNDS - ROUNDS/2 more, closes both
// ends; after the switch it also makes ROUNDS allocations of ALLOC_SIZE
// bytes and burns CPU in child_burn(), then sleeps LINGER_S seconds (a
// long-lived worker: its recorder rotates and uploads meanwhile). The parent
// (root) waits for it.
//
// prints "child pid=P uid=U output=OK|EACCES|..." (can the child still open
// $FLIGHTREC_OUTPUT by path?) and, except in "self" mode, "parent done status=S".
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 64
#define ALLOC_SIZE 4321
#define NOBODY 65534

static volatile unsigned long g_sink;
static unsigned g_linger_seconds;
static void* volatile g_block;

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noinline, noipa)) void child_burn(double seconds) {
  const double start = cpu_seconds();
  unsigned long x = 1;
  while (cpu_seconds() - start < seconds)
    for (int i = 0; i < 20000; ++i) x = x * 2862933555777941757ul + 3037000493ul;
  g_sink = x;
}

static int exchange(int sv[2], int n) {
  char out[MSG], in[MSG];
  memset(out, 'p', sizeof(out));
  for (int i = 0; i < n; ++i) {
    if (send(sv[0], out, sizeof(out), 0) != (ssize_t)sizeof(out)) return -1;
    size_t got = 0;
    while (got < sizeof(in)) {
      const ssize_t r = recv(sv[1], in + got, sizeof(in) - got, 0);
      if (r <= 0) return -1;
      got += (size_t)r;
    }
  }
  return 0;
}

static int child(int drop, int rounds) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 10;
  if (exchange(sv, rounds / 2) != 0) return 11;
  if (drop) {
    if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0) return 12;
  } else if (setuid(0) != 0) {
    return 12;
  }
  if (exchange(sv, rounds - rounds / 2) != 0) return 13;
  for (int i = 0; i < rounds; ++i) {
    char* p = malloc(ALLOC_SIZE);
    if (!p) return 14;
    g_block = p;  // escapes: the compiler keeps the malloc/free pair
    free(p);
  }
  child_burn(0.3);
  close(sv[0]);
  close(sv[1]);
  for (unsigned left = g_linger_seconds; left > 0;) left = sleep(left);
  const char* out = getenv("FLIGHTREC_OUTPUT");
  const int fd = out ? open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  printf("child pid=%d uid=%d output=%s\n", (int)getpid(), (int)getuid(),
         fd >= 0 ? "OK" : errno == EACCES ? "EACCES" : strerror(errno));
  if (fd >= 0) close(fd);
  return 0;
}

int main(int argc, char** argv) {
  if ((argc != 3 && argc != 4) ||
      (strcmp(argv[1], "drop") != 0 && strcmp(argv[1], "stay") != 0 && strcmp(argv[1], "self") != 0)) {
    fprintf(stderr, "usage: priv_drop drop|stay|self ROUNDS [LINGER_S]\n");
    return 2;
  }
  if (geteuid() != 0) {
    fprintf(stderr, "priv_drop must run as root\n");
    return 2;
  }
  const int rounds = atoi(argv[2]);
  if (argc == 4) g_linger_seconds = (unsigned)atoi(argv[3]);
  if (strcmp(argv[1], "self") == 0) return child(1, rounds);
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    const int rc = child(strcmp(argv[1], "drop") == 0, rounds);
    fflush(stdout);
    exit(rc);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 1;
  printf("parent done status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
